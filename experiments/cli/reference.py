"""The command-line reference as Markdown, walked from the argparse parsers the
``kvfabric`` command itself uses, and the Python API's reference, read from the
signatures and docstrings of the objects a script uses (``PYTHON_API``).
``docs/hooks.py`` renders both into the docs site at build time, so neither page can
drift from the code: a flag or a parameter added, renamed or removed shows there on
the next build."""

from __future__ import annotations

import argparse
import importlib
import inspect
import re

# What a script drives kvfabric with (docs/how-to/python.md), module by module.
PYTHON_API: dict[str, tuple[str, ...]] = {
    "topologies": ("Fabric", "spine_leaf", "fat_tree", "rail_optimized"),
    "topologies.scale": ("Scale",),
    "topologies.builder": ("FabricNetwork", "Controller"),
    "controller.process": ("ControllerProcess",),
    "traffic.agents": ("AgentFleet",),
    "experiments.measurement.iperf": ("iperf3",),
    "experiments.output.results": ("load_run", "Run"),
}

# Wide enough that usage lines wrap the same on every terminal and build machine.
USAGE_WIDTH = 88


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """Every command and subcommand of ``parser`` (default: ``kvfabric``'s own) with
    its usage line and a table of its arguments: flags, what they take, their
    default and their help, in the order the parser declares them."""
    if parser is None:
        from experiments.cli.main import _parser

        parser = _parser()
    lines = [
        "# Command-line reference",
        "",
        "Generated when the site is built from the argparse parsers of the `kvfabric`",
        "command (`experiments/cli/`), so it is the command as it stands.",
        "",
        *_command(parser, helptext="", depth=2),
    ]
    return "\n".join(lines).rstrip() + "\n"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Each subcommand of ``parser``: its parser and its one-line help."""
    found: dict[str, tuple[argparse.ArgumentParser, str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                found[name] = (sub, helps.get(name, ""))
    return found


def _command(parser: argparse.ArgumentParser, helptext: str, depth: int) -> list[str]:
    out = [f"{'#' * depth} {parser.prog}", ""] if depth > 2 else []
    if helptext:
        out += [_text(helptext), ""]
    elif parser.description and depth == 2:
        out += [_text(" ".join(parser.description.split())), ""]
    out += ["```", _usage(parser), "```", ""]
    rows = [_row(parser, a) for a in parser._actions if _shown(a)]
    if rows:
        out += ["| argument | default | what |", "| --- | --- | --- |", *rows, ""]
    for sub, sub_help in subcommands(parser).values():
        out += _command(sub, sub_help, min(depth + 1, 4))
    return out


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = parser.formatter_class(prog=parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _shown(action: argparse.Action) -> bool:
    return not isinstance(action, argparse._HelpAction | argparse._SubParsersAction) and (
        action.help != argparse.SUPPRESS
    )


def _row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.option_strings:
        takes = f" {_metavar(action)}" if action.nargs != 0 else ""
        name = ", ".join(f"`{flag}{takes}`" for flag in action.option_strings)
    else:
        name = f"`{_metavar(action)}`"
    default = action.default
    shown = (
        ""
        if default in (None, False, [], argparse.SUPPRESS) or not action.option_strings
        else f"`{default}`"
    )
    helptext = parser._get_formatter()._expand_help(action) if action.help else ""
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        helptext += f" (one of {', '.join(f'`{c}`' for c in action.choices)})"
    return f"| {name} | {shown} | {_text(helptext)} |"


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return (
            str(action.metavar)
            if not isinstance(action.metavar, tuple)
            else " ".join(action.metavar)
        )
    if action.choices and not action.option_strings:
        return "{" + ",".join(map(str, action.choices)) + "}"
    name = action.dest if not action.option_strings else action.dest.upper()
    return f"{name} ..." if action.nargs in ("+", "*") else name


def _text(text: str) -> str:
    """Plain help text made safe in a Markdown table cell (no HTML, no cell breaks)."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def api_markdown(api: dict[str, tuple[str, ...]] = PYTHON_API) -> str:
    """Each module of ``api`` with its docstring, and each named object with its
    signature and docstring (a class with its public methods and properties)."""
    out = [
        "# Python API",
        "",
        "Generated when the site is built from the signatures and docstrings of the",
        "objects a script uses ([Use kvfabric from Python](../how-to/python.md) puts",
        "them together). Anything that builds a fabric needs root.",
        "",
    ]
    for module_name, names in api.items():
        module = importlib.import_module(module_name)
        out += [f"## `{module_name}`", "", _doc(module), ""]
        for name in names:
            out += _object(f"{module_name}.{name}", getattr(module, name), depth=3)
    return "\n".join(out).rstrip() + "\n"


def _object(path: str, obj: object, depth: int) -> list[str]:
    out = [f"{'#' * depth} `{path}`", ""]
    signature = _signature(obj)
    if signature is not None:
        out += ["```python", f"{path.rsplit('.', 1)[-1]}{signature}", "```", ""]
    out += [_doc(obj), ""]
    if inspect.isclass(obj):
        for name, member in vars(obj).items():
            if name.startswith("_") or not (callable(member) or isinstance(member, property)):
                continue
            target = member.fget if isinstance(member, property) else member
            if isinstance(target, staticmethod | classmethod):
                target = target.__func__
            doc = inspect.getdoc(target) or ""
            kind = "property" if isinstance(member, property) else "method"
            out += [f"- `{name}{'' if kind == 'property' else _signature(target) or '()'}`"]
            if doc:
                out[-1] += f": {_escape(doc.split(chr(10) + chr(10))[0].replace(chr(10), ' '))}"
        out += [""]
    return out


def _signature(obj: object) -> str | None:
    """``obj``'s signature, its annotations as written (not as quoted strings)."""
    try:
        signature = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    params = [
        p.replace(annotation=_annotation(p.annotation)) for p in signature.parameters.values()
    ]
    returns = _annotation(signature.return_annotation)
    return str(signature.replace(parameters=params, return_annotation=returns))


class _Written(str):
    """An annotation shown as the source writes it (``repr`` without quotes)."""

    def __repr__(self) -> str:
        return str(self)


def _annotation(annotation: object) -> object:
    return _Written(annotation) if isinstance(annotation, str) else annotation


def _doc(obj: object) -> str:
    return _escape(inspect.getdoc(obj) or "")


def _escape(text: str) -> str:
    """Angle brackets outside code spans shown as text, not taken as HTML."""
    parts = re.split(r"(``[^`]+``|`[^`]+`)", text)
    return "".join(
        part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;")
        for part in parts
    )

"""The command-line reference as Markdown, walked from the argparse parsers the
``kvfabric`` command itself uses (``docs/hooks.py`` renders it into the docs site at
build time), so the page cannot drift from the command: a flag added, renamed or
removed shows there on the next build."""

from __future__ import annotations

import argparse

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

"""MkDocs hooks: pages generated from their declarations when the site is built, and
the experiment handouts included from where they live (never copied into docs/).

- ``reference/cli.md``: every ``kvfabric`` command, from its argparse parsers
  (``experiments.cli.reference``).
- ``reference/python.md``: the Python API a script uses, from its signatures and
  docstrings (``experiments.cli.reference.api_markdown``).
- ``reference/bmwg.md``: each test of the BMWG inference-fabric draft and what kvfabric
  measures for it (``experiments.bmwg.catalog.markdown``).
- ``reference/spec.md``: every spec key, from the schema's ``Field`` declarations the
  validator checks against (``experiments.spec.export.keys_markdown``).
- ``concepts/glossary.md``: every metric of summary.json with its formula, unit and
  basis (``experiments.analysis.glossary``).
- ``experiments/*.md``: ``experiments/handouts/*.md`` as they are (their README is the
  section's index page), each result page opening with what the emulation cannot
  represent (``GAP_NOTE``), and ``benchmarks/README.md`` as ``benchmarks/suite.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
HANDOUTS = ROOT / "experiments" / "handouts"
BENCHMARKS = ROOT / "benchmarks" / "README.md"
# Beside every result it affects: where the results are read, not pages away.
GAP_NOTE = """!!! note "What this result cannot show"
    Measured with kernel TCP over drop-tail queues, not RDMA over lossless Ethernet
    (no PFC pause frames, no ECN marking), at a grain where one packet stands for
    1,514 ÷ `scale.bandwidth` real bytes (at the default MTU). See
    [what the emulation cannot represent](../concepts/modelling-gap.md) before
    quoting it.

"""


def on_files(files: Files, config: Any) -> Files:
    from experiments.cli.reference import api_markdown, cli_markdown
    from experiments.spec.export import keys_markdown

    files.append(File.generated(config, "reference/cli.md", content=cli_markdown()))
    files.append(File.generated(config, "reference/spec.md", content=keys_markdown()))
    files.append(File.generated(config, "reference/python.md", content=api_markdown()))
    from experiments.analysis.glossary import markdown as glossary_markdown
    from experiments.bmwg.catalog import markdown as bmwg_markdown

    files.append(File.generated(config, "concepts/glossary.md", content=glossary_markdown()))

    files.append(File.generated(config, "reference/bmwg.md", content=bmwg_markdown()))
    for handout in sorted(HANDOUTS.glob("*.md")):
        name = "index.md" if handout.name == "README.md" else handout.name
        files.append(File.generated(config, f"experiments/{name}", abs_src_path=str(handout)))
    files.append(File.generated(config, "benchmarks/suite.md", abs_src_path=str(BENCHMARKS)))
    return _one_page_per_address(files)


def _one_page_per_address(files: Files) -> Files:
    """Two pages built to one address (``x.md`` and ``x/index.md``) would silently
    overwrite each other: refuse the build instead."""
    seen: dict[str, str] = {}
    for file in files:
        other = seen.setdefault(file.dest_uri, file.src_uri)
        if other != file.src_uri:
            raise ValueError(f"{other} and {file.src_uri} both build {file.dest_uri}")
    return files


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    src = page.file.src_uri
    if src.startswith("experiments/") and src != "experiments/index.md":
        title, _, rest = markdown.partition("\n")
        return f"{title}\n\n{GAP_NOTE}{rest}"
    return markdown

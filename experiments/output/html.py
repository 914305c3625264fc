"""``report.html`` beside ``report.md``: the same report as one self-contained page, its
figures inlined (base64 PNG), its tables styled, no script and nothing fetched from the
network, so it opens from a mail attachment or a laptop offline."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import markdown

from experiments.output.formatting import write_text

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #1d1d1f; }
h1, h2, h3 { line-height: 1.25; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: .25em .6em; vertical-align: top; }
th { background: #f4f4f6; } tr:nth-child(even) td { background: #fafafa; }
td:not(:first-child) { font-variant-numeric: tabular-nums; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
code { background: #f4f4f6; padding: 0 .2em; border-radius: 3px; }
blockquote { border-left: 4px solid #c33; margin: 1em 0; padding: .2em 1em; background: #fff5f5; }
"""
_IMG = re.compile(r'<img alt="([^"]*)" src="([^"]+)"\s*/?>')


def markdown_html(text: str, base: Path, title: str) -> str:
    """A whole HTML page for the markdown ``text``, images under ``base`` inlined; an
    image that cannot be read keeps its alt text and says so."""
    body = markdown.markdown(text, extensions=["tables", "fenced_code"])

    def inline(match: re.Match[str]) -> str:
        alt, src = match.group(1), match.group(2)
        path = (base / html.unescape(src)).resolve()
        if src.startswith(("http:", "https:", "data:")) or path.suffix.lower() != ".png":
            return match.group(0)
        try:
            data = base64.b64encode(path.read_bytes()).decode("ascii")
        except OSError:
            return f"<em>[{alt}: figure missing]</em>"
        return f'<img alt="{alt}" src="data:image/png;base64,{data}">'

    body = _IMG.sub(inline, body)
    # a link to another report.md reads as its HTML page
    body = re.sub(r'href="([^"]*?)report\.md"', r'href="\1report.html"', body)
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_html(report_md: Path) -> Path:
    """``report.html`` beside ``report_md``; returns its path."""
    text = report_md.read_text(encoding="utf-8")
    first = next((ln for ln in text.splitlines() if ln.startswith("# ")), "# kvfabric report")
    path = report_md.with_suffix(".html")
    write_text(path, markdown_html(text, report_md.parent, first[2:].strip()))
    return path

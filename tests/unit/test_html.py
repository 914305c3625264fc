"""report.html: the report as one page a reader opens offline, figures inside it."""

from __future__ import annotations

import base64

from experiments.output.html import markdown_html, write_html

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def test_the_page_inlines_its_figures_styles_its_tables_and_fetches_nothing(tmp_path):
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "a.png").write_bytes(PNG)
    md = tmp_path / "report.md"
    md.write_text(
        "# run x\n\n| q | p50 |\n| --- | ---: |\n| TTFT | 158 |\n\n"
        "![a](plots/a.png)\n\n![gone](plots/missing.png)\n\n[other run](../y/report.md)\n"
    )
    page = write_html(md).read_text()
    assert page.startswith("<!doctype html>") and "<title>run x</title>" in page
    assert "<table>" in page and "<td>TTFT</td>" in page
    assert f"data:image/png;base64,{base64.b64encode(PNG).decode()}" in page
    assert "[gone: figure missing]" in page
    assert 'href="../y/report.html"' in page
    assert "<script" not in page and 'src="http' not in page and "<link" not in page


def test_markdown_html_escapes_the_title(tmp_path):
    assert "<title>a &lt;b&gt;</title>" in markdown_html("x", tmp_path, "a <b>")

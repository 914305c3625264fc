"""``report.html`` opens in a real browser with every figure present.

The page is made by ``experiments.output.html`` from a committed reference run's
report.md and plots (into tmp_path; nothing in the results tree is written). Headless
Chromium loads it from a file URL twice: once to dump the DOM after a probe script
(added to the test's copy only: the report itself carries no script) marked each
``<img>`` with whether it decoded (``naturalWidth`` > 0), once to take a screenshot of
the whole page, which must not be blank and must hold the figures' colours (a page
of text and tables alone has under 0.02 % coloured pixels). Without a Chromium binary
the test is skipped with the reason (``sudo make setup`` installs Debian's
``chromium-headless-shell``); under CI (``CI`` set) it fails instead, so a machine
whose install step lost it cannot pass.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from experiments.output.html import markdown_html

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "results" / "reference" / "incast-collapse" / "runs"
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
# After the load event every image has been fetched; mark each with whether it decoded.
PROBE = """<script>
window.addEventListener("load", () => {
  const imgs = [...document.images];
  imgs.forEach(i => i.setAttribute("data-decoded",
    i.complete && i.naturalWidth > 0 ? "yes" : "no"));
  document.body.setAttribute("data-images", String(imgs.length));
});
</script>"""


def _chromium() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    reason = (
        "no Chromium binary (sudo make setup installs Debian's chromium-headless-shell: "
        "sudo apt-get install chromium-headless-shell)"
    )
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"CI needs Chromium: {reason}", pytrace=False)
    pytest.skip(reason)


def _browse(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        browser,
        "--headless",
        "--no-sandbox",  # `sudo make test` runs as root, where the sandbox refuses to start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",
        *args,
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def _reference_run() -> Path:
    runs = sorted(p for p in REFERENCE.iterdir() if (p / "report.md").is_file())
    assert runs, f"no committed reference run with a report under {REFERENCE}"
    return runs[0]


@pytest.mark.timeout(900)  # two browser starts; minutes on a loaded 2-core machine
def test_report_html_opens_in_headless_chromium_with_every_figure(tmp_path):
    browser = _chromium()
    run = _reference_run()
    text = (run / "report.md").read_text(encoding="utf-8")
    figures = re.findall(r"^!\[[^\]]*\]\(([^)]+\.png)\)", text, flags=re.MULTILINE)
    assert figures and all((run / f).is_file() for f in figures)
    page = markdown_html(text, run, "reference run")
    assert "<script" not in page  # the report is self-contained and script-free
    probed = tmp_path / "report.html"
    probed.write_text(page.replace("</body>", PROBE + "</body>"), encoding="utf-8")

    dom = _browse(browser, tmp_path / "dom-profile", "--dump-dom", probed.as_uri()).stdout
    assert f'data-images="{len(figures)}"' in dom, dom[:500]
    decoded = re.findall(r'<img[^>]*data-decoded="(yes|no)"', dom)
    assert decoded == ["yes"] * len(figures)

    shot = tmp_path / "report.png"
    _browse(
        browser,
        tmp_path / "shot-profile",
        f"--screenshot={shot}",
        "--window-size=1200,12000",  # the whole report, its figures below the tables
        probed.as_uri(),
    )
    pixels = imread(shot)[..., :3]  # floats in 0..1
    assert pixels.shape[0] >= 10000 and pixels.shape[1] >= 1000
    pixels = pixels[::3, ::3]  # every third pixel each way: the same shares, 9 times faster
    ink = (pixels < 0.9).any(axis=-1).mean()  # share of pixels that are not near-white
    assert float(np.std(pixels)) > 0.05 and ink > 0.02, (float(np.std(pixels)), ink)
    # the page's text and tables are grey; the figures' lines and bars are in colour
    coloured = (pixels.max(axis=-1) - pixels.min(axis=-1) > 0.3).mean()
    assert coloured > 0.002, coloured

"""``sudo kvfabric`` works as every page writes it (issue 31): ``make setup`` links the
checkout's ``.venv/bin/kvfabric`` onto root's PATH. Checked on the Makefile's own
recipe, pointed at a scratch folder (``LINK=...``) and with its root check and venv
step taken as done (``-o``), so the test needs no root and touches no system folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_KVFABRIC = ROOT / ".venv" / "bin" / "kvfabric"


def make_link(link: Path) -> str:
    done = subprocess.run(
        ["make", "-s", "-o", ".setup-root", "-o", "venv", f"LINK={link}", "link"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_setup_puts_kvfabric_on_roots_path() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "setup: .setup-root apt ovs venv link" in makefile
    assert "LINK := /usr/local/bin/kvfabric" in makefile


def test_the_link_is_made_once_and_again_is_a_no_op(tmp_path: Path) -> None:
    link = tmp_path / "kvfabric"
    assert "->" in make_link(link)
    assert link.is_symlink() and Path(link.readlink()) == VENV_KVFABRIC
    assert "on PATH" in make_link(link)
    assert Path(link.readlink()) == VENV_KVFABRIC


def test_another_checkouts_link_is_replaced_a_file_never(tmp_path: Path) -> None:
    link = tmp_path / "kvfabric"
    link.symlink_to("/elsewhere/.venv/bin/kvfabric")
    make_link(link)
    assert Path(link.readlink()) == VENV_KVFABRIC

    link.unlink()
    link.write_text("#!/bin/sh\n")
    assert "not a link" in make_link(link)
    assert link.read_text() == "#!/bin/sh\n"

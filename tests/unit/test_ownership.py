"""What a command run through sudo writes in its user's folders is handed to that user."""

from __future__ import annotations

import os
import time

from experiments.output import ownership
from experiments.output.ownership import hand_back, invoking_user


def test_only_root_running_for_a_sudo_user_hands_anything_back():
    assert invoking_user({"SUDO_UID": "1000", "SUDO_GID": "1000"}, euid=0) == (1000, 1000)
    assert invoking_user({"SUDO_UID": "1000", "SUDO_GID": "1000"}, euid=1000) is None
    assert invoking_user({}, euid=0) is None  # a root login, CI
    assert invoking_user({"SUDO_UID": "0", "SUDO_GID": "0"}, euid=0) is None
    assert invoking_user({"SUDO_UID": "x", "SUDO_GID": "1"}, euid=0) is None


def test_what_the_command_wrote_in_the_users_space_is_handed_back(tmp_path, monkeypatch):
    me = os.getuid()  # here the "root" that wrote and the user's folder are both ours
    old = tmp_path / "results" / "old.json"
    old.parent.mkdir()
    old.write_text("{}")
    time.sleep(0.05)  # file times are coarse (a jiffy): keep "before" and "during" apart
    since = time.time_ns()
    time.sleep(0.05)
    run = tmp_path / "results" / "exp" / "run1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "index").write_text("")
    given: list[str] = []
    monkeypatch.setattr(
        ownership.os, "chown", lambda p, uid, gid, follow_symlinks=True: given.append(str(p))
    )
    count = hand_back([tmp_path / "results"], (me, me), since, writer=me)
    rel = sorted(os.path.relpath(p, tmp_path) for p in given)
    assert "results/exp/run1/summary.json" in rel and "results/exp" in rel
    assert "results/old.json" not in rel  # written before the command
    assert not any(p.startswith(".git") for p in rel) and count == len(given)
    given.clear()
    assert hand_back([tmp_path / "results"], (me + 4242, me), since, writer=me) == 0
    assert given == []  # not that user's folder: nothing is given away


def test_a_folder_root_made_counts_as_the_users_when_its_parent_is_theirs(tmp_path):
    from experiments.output.ownership import in_users_space

    me = os.getuid()
    made = tmp_path / "results"
    made.mkdir()
    assert in_users_space(made, me) and in_users_space(made / "not-yet", me)
    assert not in_users_space(made, me + 4242)

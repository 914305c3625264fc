"""What a command run through ``sudo`` writes in its user's folders belongs to that user.

``sudo kvfabric run`` (and ``sudo make demo``) runs as root, so the results it writes
under a user's checkout would be root's, and the user could not delete or regenerate
them without root. ``handed_back(roots)`` wraps a command: afterwards every path under
each root that root owns and that changed during the command is given to the invoking
user (``SUDO_UID``/``SUDO_GID``), provided the root lies in that user's space (it, or
its nearest existing ancestor, is theirs). Without sudo, or as a plain root login, it
does nothing. ``.git`` and ``.venv`` are never entered.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

# Never entered: git's own files, and the venv (`make` hands it back; a walk of its
# tens of thousands of files would cost every command half a second).
SKIPPED = {".git", ".venv"}


def invoking_user(
    env: Mapping[str, str] | None = None, euid: int | None = None
) -> tuple[int, int] | None:
    """(uid, gid) of the user who ran this process through sudo, if it runs as root."""
    env = os.environ if env is None else env
    euid = os.geteuid() if euid is None else euid
    uid, gid = env.get("SUDO_UID", ""), env.get("SUDO_GID", "")
    if euid != 0 or not uid.isdigit() or not gid.isdigit() or int(uid) == 0:
        return None
    return int(uid), int(gid)


def in_users_space(root: Path, uid: int) -> bool:
    """``root`` belongs to ``uid``, or (made by root, or not yet made) its nearest
    existing ancestor does."""
    with contextlib.suppress(OSError):
        if root.stat().st_uid == uid:
            return True
    for p in root.parents:
        with contextlib.suppress(OSError):
            return p.stat().st_uid == uid
    return False


def written_by_root(root: Path, since_ns: int, writer: int = 0) -> Iterator[Path]:
    """Paths under ``root`` (itself included) owned by ``writer`` (root) and changed since
    ``since_ns``."""
    if not root.is_dir():
        with contextlib.suppress(OSError):
            st = root.lstat()
            if st.st_uid == writer and st.st_ctime_ns >= since_ns:
                yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED]
        for name in [".", *dirnames, *filenames]:
            p = Path(dirpath) / name if name != "." else Path(dirpath)
            with contextlib.suppress(OSError):
                st = p.lstat()
                if st.st_uid == writer and st.st_ctime_ns >= since_ns:
                    yield p


def hand_back(roots: Iterable[Path], owner: tuple[int, int], since_ns: int, writer: int = 0) -> int:
    """Give ``owner`` what ``writer`` (root) wrote under ``roots`` since ``since_ns``;
    how many paths."""
    given = 0
    for root in {Path(r).absolute() for r in roots}:
        if not in_users_space(root, owner[0]):
            continue
        for p in written_by_root(root, since_ns, writer):
            with contextlib.suppress(OSError):
                os.chown(p, *owner, follow_symlinks=False)
                given += 1
    return given


@contextlib.contextmanager
def handed_back(roots: Iterable[Path]) -> Iterator[None]:
    """Run the body; then hand back what it wrote under ``roots`` (on failure and
    Ctrl-C too). A no-op unless running as root through sudo."""
    owner = invoking_user()
    since = time.time_ns() - 1_000_000_000  # ctime granularity: a second to spare
    try:
        yield
    finally:
        if owner is not None:
            hand_back(list(roots), owner, since)

"""Mininet nodes whose shell output never ends a run on a byte that is not UTF-8.

A Mininet node runs a ``bash`` in a pseudo-terminal and decodes everything it reads
from it as strict UTF-8 (``Node.read``); a single stray byte raises
``UnicodeDecodeError`` in the middle of building or stopping a fabric. One CI run
lost a run so (``0xbe in position 110`` while building a 4-switch spine-leaf; not
reproduced in 5 tries since). These classes decode the same stream (and ``pexec``'s
output) with the bytes that are not UTF-8 replaced (U+FFFD), and log a warning with the
80 bytes either side of each bad one (once per distinct excerpt), so what printed them
can be found.
"""

from __future__ import annotations

import codecs
import logging
from subprocess import PIPE
from typing import Any

from mininet.node import Host, OVSSwitch, RemoteController

log = logging.getLogger("kvfabric.shell")

ERRORS = "kvfabric-shell"
_reported: set[str] = set()


def _replace_and_report(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    data = bytes(exc.object)
    around = data[max(0, exc.start - 80) : exc.end + 80]
    key = around.hex()
    if key not in _reported:
        _reported.add(key)
        log.warning("a node's shell printed bytes that are not UTF-8 (replaced): %r", around)
    return "\ufffd", exc.end


codecs.register_error(ERRORS, _replace_and_report)


def tolerant_decoder() -> codecs.IncrementalDecoder:
    """The incremental UTF-8 decoder Mininet uses, replacing (and reporting) bad bytes."""
    return codecs.getincrementaldecoder("utf-8")(errors=ERRORS)


class TolerantShell:
    """Mix in before a Mininet node class: its shell's output is decoded tolerantly.
    ``Node.__init__`` makes its decoder and then starts the shell; the decoder is
    replaced here, before the first read."""

    def startShell(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802 (Mininet's name)
        self.decoder = tolerant_decoder()
        super().startShell(*args, **kwargs)  # type: ignore[misc]

    def pexec(self, *args: Any, **kwargs: Any) -> tuple[str, str, int]:
        """Mininet's ``pexec`` (a command's output, error and exit code), decoded the
        same way."""
        popen = self.popen(  # type: ignore[attr-defined]
            *args, stdin=PIPE, stdout=PIPE, stderr=PIPE, **kwargs
        )
        out, err = popen.communicate()
        code = popen.wait()
        return tolerant_decoder().decode(out, True), tolerant_decoder().decode(err, True), code


class FabricHost(TolerantShell, Host):
    pass


class FabricSwitch(TolerantShell, OVSSwitch):
    pass


class FabricController(TolerantShell, RemoteController):
    pass

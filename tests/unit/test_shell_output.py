"""A node's shell output with a byte that is not UTF-8 is decoded, not fatal."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("mininet.node")

from topologies.shell_output import FabricHost, FabricSwitch, tolerant_decoder  # noqa: E402


def test_a_stray_byte_is_replaced_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    decoder = tolerant_decoder()
    with caplog.at_level(logging.WARNING, logger="kvfabric.shell"):
        text = decoder.decode(b"ovs-vsctl: ok\n\xbe tail\n")
    assert text == "ovs-vsctl: ok\n\ufffd tail\n"
    assert "\\xbe" in caplog.text  # the bytes around it are logged, to find the writer


def test_a_character_split_across_reads_is_still_whole() -> None:
    decoder = tolerant_decoder()
    arrow = "→".encode()
    assert decoder.decode(b"a" + arrow[:1]) + decoder.decode(arrow[1:] + b"b") == "a→b"


def test_the_fabric_nodes_take_the_tolerant_decoder_before_their_shell_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import mininet.node

    started: list = []
    monkeypatch.setattr(
        mininet.node.Node, "startShell", lambda self, *a, **k: started.append(self.decoder)
    )
    for cls in (FabricHost, FabricSwitch):
        cls.__new__(cls).startShell()  # the mixin's, then Mininet's (recorded)
    assert [d.errors for d in started] == ["kvfabric-shell", "kvfabric-shell"]


def test_pexec_output_is_decoded_tolerantly() -> None:
    class Popen:
        def communicate(self) -> tuple[bytes, bytes]:
            return b"ok \xbe\n", b""

        def wait(self) -> int:
            return 0

    host = FabricHost.__new__(FabricHost)
    host.popen = lambda *a, **k: Popen()  # type: ignore[method-assign]
    assert host.pexec("ethtool", "-K", "eth0") == ("ok \ufffd\n", "", 0)

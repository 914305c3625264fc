"""A run's PKI for OpenFlow over TLS: the controller proves its address, a switch its
membership of the run, a stranger without the run's certificate is refused, and
nothing of it outlives the run."""

from __future__ import annotations

import socket
import ssl
import stat
import threading

import pytest

from controller.main import listen_args
from controller.tls import FILES, RunPKI


def _handshake(files, client) -> str:
    """A TLS server configured as os-ken is (controller key, CA, client certificate
    required) and one client presenting the switch certificate of ``client`` (a run's
    files, or None: none); returns "ok" or how it failed."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(files.path("controller.pem"), files.path("controller.key"))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    server_ctx.load_verify_locations(files.path("ca.pem"))
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(files.path("ca.pem"))
    if client is not None:
        client_ctx.load_cert_chain(client.path("switch.pem"), client.path("switch.key"))
    a, b = socket.socketpair()
    errors: list[str] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                s.sendall(b"hello")
        except (ssl.SSLError, OSError) as exc:
            errors.append(str(exc))

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname="127.0.0.1") as c:
            data = c.recv(5)  # TLS 1.3: a refused client certificate shows up here
            return "ok" if data == b"hello" else f"closed ({errors})"
    except (ssl.SSLError, OSError) as exc:
        return f"refused: {exc}"
    finally:
        t.join(timeout=10)


def test_a_switch_with_the_runs_certificate_is_admitted_and_a_stranger_is_not(tmp_path):
    with RunPKI(parent=tmp_path) as files, RunPKI(parent=tmp_path) as other:
        assert _handshake(files, files) == "ok"
        assert _handshake(files, None) != "ok"  # no certificate
        assert _handshake(files, other) != "ok"  # another run's: its CA is not this one


def test_the_pki_is_readable_by_root_alone_and_gone_after_the_run(tmp_path):
    with RunPKI(parent=tmp_path) as files:
        assert sorted(p.name for p in files.folder.iterdir()) == sorted(FILES)
        for name in FILES:
            assert stat.S_IMODE(files.path(name).stat().st_mode) == 0o600
        folder = files.folder
    assert not folder.exists()
    with pytest.raises(RuntimeError), RunPKI(parent=tmp_path) as files:
        folder = files.folder
        raise RuntimeError("a build failing half-way")
    assert not folder.exists()
    with pytest.raises(KeyError, match="ca.pem"):
        files.path("server.key")


def test_the_controller_listens_in_tls_only_when_given_a_pki():
    plain = listen_args(6653)
    assert plain == ["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", "6653"]
    tls = listen_args(6653, "/run/x")
    assert "--ofp-tcp-listen-port" not in tls and "--ofp-ssl-listen-port" in tls
    assert tls[tls.index("--ca-certs") + 1] == "/run/x/ca.pem"  # switches must prove the run

"""The authenticated TCP control channel of a worker on another machine: the handshake's
messages (pure), and a real worker on 127.0.0.1 that serves only the holder of the run's
secret, refuses everything else with no reply, and keeps serving."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topologies.cluster.ssh import Server
from traffic.agents import auth
from traffic.agents.channel import parse_bind, read_secret, secret_line
from traffic.agents.launcher import ControlClient
from traffic.agents.sites import SiteProcess, WorkerSite

ROOT = str(Path(__file__).resolve().parents[2])
SN, CN = b"s" * auth.NONCE_LEN, b"c" * auth.NONCE_LEN


# ----- the messages ---------------------------------------------------------------------


def test_the_right_secret_passes_both_ways():
    key = auth.new_secret()
    assert auth.read_challenge(auth.challenge(SN)) == SN
    assert auth.check_response(key, SN, auth.response(key, SN, CN)) == CN
    auth.check_proof(key, SN, CN, auth.proof(key, SN, CN))
    assert key not in auth.response(key, SN, CN) + auth.proof(key, SN, CN)


def test_a_wrong_secret_a_replay_and_a_reflected_proof_are_refused():
    key, other = auth.new_secret(), auth.new_secret()
    with pytest.raises(auth.HandshakeError, match="secret"):
        auth.check_response(key, SN, auth.response(other, SN, CN))
    replayed = auth.response(key, SN, CN)  # answered another connection's nonce
    with pytest.raises(auth.HandshakeError, match="secret"):
        auth.check_response(key, b"t" * auth.NONCE_LEN, replayed)
    with pytest.raises(auth.HandshakeError, match="agent does not prove"):
        auth.check_proof(other, SN, CN, auth.proof(key, SN, CN))
    reflected = auth.challenge(CN) + auth.proof(key, SN, CN)  # the server's MAC as a response
    with pytest.raises(auth.HandshakeError, match="secret"):
        auth.check_response(key, SN, reflected)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"KVFA\x02" + bytes(64), "version 2"),
        (b'{"cmd":"status"}\n' + bytes(52), "start with"),
        (auth.response(bytes(32), SN, CN) + b"x", "70 bytes"),
    ],
)
def test_a_response_of_another_shape_is_refused_before_any_mac(data, why):
    with pytest.raises(auth.HandshakeError, match=why):
        auth.check_response(auth.new_secret(), SN, data)


def test_the_bind_address_is_a_cluster_address_never_every_address():
    assert parse_bind("10.251.0.12:0") == ("10.251.0.12", 0)
    assert parse_bind("[fd00::2]:4711") == ("fd00::2", 4711)
    for text in ("0.0.0.0:0", "[::]:0", "0.0.0.0:5000"):
        with pytest.raises(ValueError, match="cluster address"):
            parse_bind(text)
    for text in ("localhost:0", "10.0.0.1", "10.0.0.1:70000", ":0"):
        with pytest.raises(ValueError, match="--control-tcp"):
            parse_bind(text)
    with pytest.raises(ValueError, match="cluster address"):
        WorkerSite(Server("localhost"), "0.0.0.0")


def test_the_secret_is_read_from_a_pipe_and_nothing_after_it():
    key = auth.new_secret()
    r, w = os.pipe()
    try:
        os.write(w, secret_line(key) + b"rest")
        assert read_secret(r) == key
        assert os.read(r, 10) == b"rest"
        os.write(w, b"abcd\n")
        with pytest.raises(ValueError, match="bytes, not 32"):
            read_secret(r)
        os.close(w)
        w = -1
        with pytest.raises(ValueError, match="closed"):
            read_secret(r)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


# ----- a real worker on 127.0.0.1 -------------------------------------------------------


class Running:
    """A worker in TCP control mode on 127.0.0.1 serving no hosts, started as the
    launcher starts one (``WorkerSite.argv``, ``SiteProcess``), stopped in ``close``."""

    def __init__(self, tmp_path: Path, handshake_timeout_s: float = 0.5) -> None:
        self.log_path = tmp_path / "worker.log"
        self.secret = auth.new_secret()
        args = ["--priority", "normal", "--handshake-timeout-s", f"{handshake_timeout_s:g}"]
        with open(self.log_path, "wb") as log:
            self.site = SiteProcess(
                WorkerSite(Server("localhost"), "127.0.0.1").argv(args, ROOT),
                log,
                self.secret,
                hosts=[],
            )
        self.proc = self.site.proc
        deadline = time.monotonic() + 20
        while (address := self.site.address()) is None:
            assert self.proc.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, "no announcement"
            time.sleep(0.02)
        self.address = address

    def status(self) -> dict:
        client = ControlClient(self.address, timeout=5, secret=self.secret)
        try:
            return client.request("status")
        finally:
            client.close()

    def log(self) -> str:
        return self.log_path.read_text()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
        finally:
            self.site.close_pipes()


@pytest.fixture
def worker(tmp_path):
    running = Running(tmp_path)
    try:
        yield running
    finally:
        running.close()


def until_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the worker sends until it closes the connection."""
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 16):
            data += chunk
    return data


def refused(got: bytes) -> bool:
    """What a refused peer saw: the challenge at most (a reset may discard even that),
    never a control reply."""
    return got in (b"",) or (len(got) == auth.CHALLENGE_LEN and got.startswith(auth.MAGIC))


def test_the_holder_of_the_secret_is_served(worker):
    reply = worker.status()
    assert reply["ok"] and reply["rows"] == 0
    assert worker.address[0] == "127.0.0.1" and worker.address[1] > 0


def test_a_control_line_without_a_handshake_gets_no_reply_and_the_worker_goes_on(worker):
    with socket.create_connection(worker.address, timeout=5) as sock:
        sock.sendall(b'{"cmd":"status"}\n')
        got = until_closed(sock)
    assert refused(got), got
    assert worker.status()["ok"]
    assert "refused a control connection from 127.0.0.1:" in worker.log()


def test_a_wrong_secret_is_refused_and_the_worker_goes_on(worker):
    with pytest.raises(auth.HandshakeError, match="closed the connection during the proof"):
        ControlClient(worker.address, timeout=5, secret=auth.new_secret())
    assert worker.status()["ok"]
    assert "does not prove the run's secret" in worker.log()


def test_a_response_replayed_from_another_connection_is_refused(worker):
    with socket.create_connection(worker.address, timeout=5) as first:
        nonce = auth.read_challenge(first.recv(auth.CHALLENGE_LEN))
        recorded = auth.response(worker.secret, nonce, os.urandom(auth.NONCE_LEN))
        first.sendall(recorded)
        assert len(first.recv(auth.PROOF_LEN)) == auth.PROOF_LEN  # this one was honest
    with socket.create_connection(worker.address, timeout=5) as second:
        second.sendall(recorded)
        got = until_closed(second)
    assert refused(got), got
    assert worker.status()["ok"]


@pytest.mark.parametrize(
    "first", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 4, auth.MAGIC + b"\x01" + os.urandom(1 << 20)]
)
def test_garbage_or_an_oversized_first_message_is_refused(worker, first):
    with socket.create_connection(worker.address, timeout=5) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(first)
        got = until_closed(sock)
    assert refused(got), got
    assert worker.status()["ok"]


def test_a_silent_peer_is_dropped_after_the_timeout_without_holding_up_others(worker):
    with socket.create_connection(worker.address, timeout=5) as silent:
        t0 = time.monotonic()
        assert worker.status()["ok"]  # served while the silent peer waits
        got = until_closed(silent)
        waited = time.monotonic() - t0
    assert len(got) == auth.CHALLENGE_LEN
    assert 0.3 < waited < 3.0
    assert "no response within 0.5 s" in worker.log()


def test_the_worker_refuses_to_listen_on_every_address(tmp_path):
    (tmp_path / "hosts.json").write_text("[]")
    proc = subprocess.run(
        [
            "env",
            f"PYTHONPATH={ROOT}",
            sys.executable,
            "-m",
            "traffic.agents.worker",
            "--hosts",
            str(tmp_path / "hosts.json"),
            "--control-tcp",
            "0.0.0.0:0",
        ],
        input=secret_line(auth.new_secret()),
        capture_output=True,
        timeout=20,
    )
    assert proc.returncode == 2
    assert b"cluster address" in proc.stderr
    assert proc.stdout == b""  # nothing announced: it never listened

"""The controller's local control channel: one JSON object per line over a
Unix socket (never a TCP port), request in, answer out."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import threading
import traceback
from collections.abc import Callable
from typing import Any

log = logging.getLogger("kvfabric.controller.channel")


class ErrorLog(logging.Handler):
    """Every ERROR-or-worse record of any logger (os-ken's own threads
    included), with its traceback text: the channel's status reports them.
    ``install`` puts one on the root logger; the app reads ``snapshot``."""

    LIMIT = 100  # records kept; later ones are only counted
    CHARS = 10_000  # of each record (os-ken's parser errors carry a hex dump)
    _installed: ErrorLog | None = None

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        self.records: list[str] = []
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a bad format string must still count as an error
            text = f"{record.name}: {record.msg!r} {record.args!r}"
        if len(self.records) < self.LIMIT:
            self.records.append(text[: self.CHARS])
        else:
            self.dropped += 1

    def snapshot(self) -> list[str]:
        with self.lock:
            more = [f"... and {self.dropped} more errors"] if self.dropped else []
            return list(self.records) + more

    @classmethod
    def install(cls) -> ErrorLog:
        """The collector on the root logger (added once per process)."""
        if cls._installed is None:
            cls._installed = cls()
            logging.getLogger().addHandler(cls._installed)
        return cls._installed


class ChannelServer:
    """Serves ``handler(request_dict) -> answer_dict`` on ``path`` in a thread.
    A handler exception becomes ``{"error": ..., "traceback": ...}``."""

    def __init__(self, path: str, handler: Callable[[dict], dict]) -> None:
        self.path = path

        class _Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                for line in self.rfile:
                    try:
                        answer = handler(json.loads(line))
                    except Exception as exc:
                        log.error("channel request failed:\n%s", traceback.format_exc())
                        answer = {"error": str(exc), "traceback": traceback.format_exc()}
                    self.wfile.write(json.dumps(answer, default=str).encode() + b"\n")
                    self.wfile.flush()

        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.server = socketserver.ThreadingUnixStreamServer(path, _Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ChannelError(RuntimeError):
    """The controller answered a request with an error."""


class ChannelClient:
    """Asks the controller over its Unix socket."""

    def __init__(self, path: str, timeout_s: float = 10.0) -> None:
        self.path = path
        self.timeout_s = timeout_s

    def ask(self, cmd: str, **fields: Any) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout_s)
            sock.connect(self.path)
            sock.sendall(json.dumps({"cmd": cmd, **fields}).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        answer = json.loads(data)
        if "error" in answer:
            raise ChannelError(answer["error"])
        return answer

    def status(self) -> dict:
        return self.ask("status")

    def rules(self) -> dict:
        """The proactive rule set (``RuleSet.to_dict``)."""
        return self.ask("rules")["rules"]

    def placed(self) -> list[dict]:
        """The exact-match rules the ``adaptive`` policy placed (``Rule.to_dict``)."""
        return self.ask("rules")["placed"]

    def ports(self) -> dict:
        return self.ask("ports")["ports"]

    def events(self) -> list[dict]:
        return self.ask("events")["events"]

    def set_policy(self, policy: str) -> dict:
        return self.ask("set_policy", policy=policy)

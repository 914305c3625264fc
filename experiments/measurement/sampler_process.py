"""The samplers in a process of their own, so that measuring never competes with the
coordinator for Python's GIL (a netlink dump's parse held the coordinator's next
decision up to 5 ms at a time, and the messages it was about to send went out late).

    with SamplerProcess(out_dir, queue_ports, queue_hz=200, link_ports=ports) as s:
        ...                                       # the traffic
    s.table("queues"), s.rates()                  # after the with block

The child (``python -m experiments.measurement.sampler_process CONFIG``) runs the samplers of
``experiments.measurement.samplers`` on threads, says ``ready`` on stdout once each has opened
its socket, and on ``stop`` (a line on stdin, or its stdin closing) stops them and
writes ``<name>.parquet`` and ``samplers.json`` (rates, resolution, errors) to the
output folder. It dies with its parent. A sampler that failed is reported by
``stop()`` as ``SamplerError``, as the thread samplers do.

With ``chunks_dir`` (the run's folder) the child also saves each sampler's new rows
there every ``flush_s`` seconds, and the rest at ``stop`` (``experiments.measurement.chunks``:
``<run>/partial/<name>/``), so a run killed with SIGKILL keeps its samples up to the last
second. The saving runs on the child's main thread, which otherwise only waits for
``stop``: a flush holds this process's GIL for a few milliseconds a second, which can
delay one queue tick (skipped, never caught up: ``samplers``), and the coordinator's
process not at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Self

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from experiments.measurement.samplers import CpuSampler, LinkSampler, QueueSampler, SamplerError

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0


class SamplerProcess:
    """Queue, link and CPU samplers in a child process (see the module docstring).

    ``queue_ports`` / ``link_ports``: interface name -> (switch, port) in this
    namespace; a sampler with no ports (or ``cpu_hz`` None) is not run."""

    def __init__(
        self,
        out_dir: str | os.PathLike,
        queue_ports: dict[str, tuple[str, int]],
        queue_hz: float = 200.0,
        link_ports: dict[str, tuple[str, int]] | None = None,
        link_hz: float = 10.0,
        cpu_hz: float | None = 10.0,
        chunks_dir: str | os.PathLike | None = None,
        flush_s: float = 1.0,
    ) -> None:
        self.out = Path(out_dir)
        if not flush_s > 0:
            raise ValueError(f"flush_s={flush_s!r}; must be > 0")
        saved = None if chunks_dir is None else str(Path(chunks_dir).resolve())
        self.config = {
            "out": str(self.out.resolve()),
            "chunks": {"dir": saved, "flush_s": flush_s} if saved else None,
            "queues": {"ports": queue_ports, "rate_hz": queue_hz} if queue_ports else None,
            "links": {"ports": link_ports, "rate_hz": link_hz} if link_ports else None,
            "cpu": {"rate_hz": cpu_hz} if cpu_hz else None,
        }
        for name in ("queues", "links"):  # bad arguments fail here, not in the child
            conf = self.config[name]
            if conf is not None:
                _make(name, conf)
        self.proc: subprocess.Popen | None = None
        self.result: dict[str, Any] = {}

    def start(self) -> Self:
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / "samplers.config.json"
        path.write_text(json.dumps(self.config))
        self.proc = self._popen(path)
        self._await_ready()
        return self

    def _popen(self, path: Path) -> subprocess.Popen:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
        )
        with open(self.out / "samplers.log", "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "experiments.measurement.sampler_process", str(path)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )

    def _await_ready(self) -> None:
        line = _readline(self.proc, READY_TIMEOUT_S)
        if line.strip() != "ready":
            self._kill()
            raise SamplerError(f"the sampler process did not start: {line.strip() or self._log()}")

    def stop(self, raise_error: bool = True) -> None:
        """Stop the samplers and read what they wrote; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            with contextlib.suppress(BrokenPipeError, OSError):
                proc.stdin.write("stop\n")
                proc.stdin.flush()
                proc.stdin.close()
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        self._collect()
        try:
            self.result = json.loads((self.out / "samplers.json").read_text())
        except (OSError, ValueError):
            self.result = {"error": f"the sampler process wrote no results: {self._log()}"}
        errors = self.result.get("errors") or (
            [self.result["error"]] if "error" in self.result else []
        )
        if raise_error and errors:
            raise SamplerError("; ".join(errors))

    def _collect(self) -> None:
        """Bring what the child wrote into ``out`` (here it already is)."""

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def _log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.out / "samplers.log").read_text(errors="replace").strip()[-400:]
        return "(no log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop(raise_error=exc_type is None)

    # ----- results ---------------------------------------------------------------------
    def rates(self) -> dict[str, dict[str, float]]:
        """name -> {achieved_hz, requested_hz, target_hz, resolution_ms, adaptations}."""
        return self.result.get("rates", {})

    def table(self, name: str) -> pd.DataFrame:
        path = self.out / f"{name}.parquet"
        return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def _make(name: str, conf: dict[str, Any]) -> Any:
    if name == "cpu":
        return CpuSampler(conf["rate_hz"])
    ports = {k: (v[0], int(v[1])) for k, v in conf["ports"].items()}
    cls = QueueSampler if name == "queues" else LinkSampler
    return cls(ports, conf["rate_hz"])


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            return ""
    return proc.stdout.readline()


class _Saver:
    """Each sampler's rows not yet saved, appended as one chunk per sampler (``chunks``:
    ``{dir, flush_s}``, or ``None``: nothing is saved)."""

    def __init__(self, chunks: dict[str, Any] | None, samplers: dict[str, Any]) -> None:
        self.samplers = samplers
        self.flush_s = float(chunks["flush_s"]) if chunks else None
        self.writers: dict[str, Any] = {}
        self.failed: set[str] = set()
        if chunks:
            from experiments.measurement.chunks import ChunkWriter

            try:
                self.writers = {n: ChunkWriter(chunks["dir"], n) for n in samplers}
            except OSError as exc:
                print(f"cannot save rows to the run folder: {exc}", file=sys.stderr, flush=True)

    def write(self, name: str, path: Path) -> None:
        """The whole table of sampler ``name`` as one parquet file: its saved chunks,
        streamed one at a time (never all in memory), then the rows still held."""
        sampler, writer = self.samplers[name], self.writers.get(name)
        rest = pa.Table.from_pandas(
            sampler.table(start=writer.rows if writer else 0), preserve_index=False
        )
        if writer is None or writer.rows == 0:
            pq.write_table(rest, path)
            return
        out: pq.ParquetWriter | None = None
        try:
            for chunk in writer.paths():  # its own (a cluster run's servers' sit beside)
                table = pq.read_table(chunk)
                out = out or pq.ParquetWriter(path, table.schema)
                out.write_table(table)
            if out is None:
                pq.write_table(rest, path)
            elif rest.num_rows:
                out.write_table(rest.cast(out.schema))
        finally:
            if out is not None:
                out.close()

    def save(self, only: str | None = None) -> None:
        for name, writer in self.writers.items():
            if name in self.failed or (only is not None and name != only):
                continue
            sampler = self.samplers[name]
            try:
                writer.append(sampler.table(start=writer.rows))
                if hasattr(sampler, "forget"):  # saved: memory stays flat on a long run
                    sampler.forget(writer.rows)
            except Exception as exc:  # a full disk costs the live copy, never the samples
                self.failed.add(name)
                print(
                    f"{name}: saving its rows to the run folder failed, given up: {exc}",
                    file=sys.stderr,
                    flush=True,
                )


def _stop_asked(timeout_s: float | None) -> bool:
    """Whether stdin said ``stop`` (or closed) within ``timeout_s`` (``None``: wait)."""
    import select

    if timeout_s is not None and not select.select([sys.stdin], [], [], timeout_s)[0]:
        return False
    sys.stdin.readline()
    return True


def main(argv: list[str]) -> int:
    from topologies.processes import die_with_parent

    die_with_parent()
    config = json.loads(Path(argv[0]).read_text())
    out = Path(config["out"])
    samplers = {n: _make(n, config[n]) for n in ("queues", "links", "cpu") if config.get(n)}
    started = []
    errors: list[str] = []
    try:
        for s in samplers.values():
            s.start()
            started.append(s)
    except Exception as exc:
        print(f"failed: {type(exc).__name__}: {exc}", flush=True)
        for s in started:
            s.stop(raise_error=False)
        return 1
    print("ready", flush=True)
    saver = _Saver(config.get("chunks"), samplers)
    with contextlib.suppress(KeyboardInterrupt):
        while not _stop_asked(saver.flush_s):  # "stop", or EOF when the parent is gone
            saver.save()
    rates = {}
    for name, s in samplers.items():
        try:
            s.stop()
        except SamplerError as exc:
            errors.append(str(exc))
        saver.save(name)
        saver.write(name, out / f"{name}.parquet")
        rates[name] = s.rates()
    (out / "samplers.json").write_text(json.dumps({"rates": rates, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The samplers of a fabric spread over servers: one sampler process on each server
that runs switches (its queues and links, and its CPU), and this machine's CPU
always (the coordinator and the agents it runs are here).

A server's samplers run there, through ssh, from the same path as here
(``kvfabric doctor --cluster`` checks it): the configuration goes over on stdin of
one ssh command, the tables come back as one tar stream when they stop, and the
server's folder is removed. Their rows gain a ``server`` column, and their ``t_ns`` is
moved onto this machine's clock by the server's measured offset (0 on a local
cluster). As the run goes, each
server's samplers save their rows as chunks there, and ``ChunkPull`` brings the new
ones into this run's ``partial/`` every ``flush_s`` (``<seq>-s<i>.parquet``), so a
run killed with SIGKILL keeps each server's rows up to its last pull.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from experiments.measurement.chunks import PARTIAL, ChunkWriter
from experiments.measurement.sampler_process import SamplerError, SamplerProcess
from topologies.processes import die_with_parent

LOCAL = "localhost"
log = logging.getLogger("kvfabric.samplers")


class RemoteSamplerProcess(SamplerProcess):
    """``SamplerProcess`` on ``server`` (a ``topologies.cluster.ssh.Server``). With
    ``chunks_dir`` (the run's folder here) the server's samplers save their rows as
    chunks there, and a ``ChunkPull`` brings each new chunk into this run's
    ``partial/`` every ``flush_s`` (named by ``writer``, its rows labelled ``server``)."""

    def __init__(
        self,
        server: Any,
        remote_dir: str,
        *args: Any,
        chunks_dir: Path | None = None,
        writer: str = "s1",
        label: str = "",
        offset_ns: int = 0,
        **kwargs: Any,
    ) -> None:
        kwargs["chunks_dir"] = None  # the child's chunks go to the server's own folder
        super().__init__(*args, **kwargs)
        self.server, self.remote_dir = server, remote_dir
        self.flush_s = float(kwargs.get("flush_s", 1.0))
        self.run_dir, self.writer, self.label = chunks_dir, writer, label or str(server)
        self.offset_ns = offset_ns
        self.pull: ChunkPull | None = None

    def start(self) -> RemoteSamplerProcess:
        self.out.mkdir(parents=True, exist_ok=True)
        chunks = {"dir": self.remote_dir, "flush_s": self.flush_s} if self.run_dir else None
        config = dict(self.config, out=self.remote_dir, chunks=chunks)
        path = f"{self.remote_dir}/samplers.config.json"
        proc = self.server.run(
            f"umask 077 && mkdir -p {self.remote_dir} && cat > {path}", stdin=json.dumps(config)
        )
        if proc.returncode != 0:
            raise SamplerError(f"samplers on {self.server}: {proc.stderr.strip()}")
        root = str(Path(__file__).resolve().parents[2])
        argv = [
            "env",
            f"PYTHONPATH={root}",
            sys.executable,
            "-m",
            "experiments.measurement.sampler_process",
            path,
        ]
        with open(self.out / "samplers.log", "wb") as log:
            self.proc = subprocess.Popen(
                self.server.command(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                preexec_fn=die_with_parent,
            )
        self._await_ready()
        if self.run_dir is not None:
            socket = self.out.resolve() / "pull.sock"  # ssh adds ~17 bytes; AF_UNIX: 108
            self.pull = ChunkPull(
                self.server,
                f"{self.remote_dir}/{PARTIAL}",
                self.run_dir,
                self.writer,
                self.label,
                self.flush_s,
                self.offset_ns,
                socket if len(str(socket)) < 80 else None,
            ).start()
        return self

    def stop(self, raise_error: bool = True) -> None:
        if self.pull is not None:  # the complete tables come back at stop
            self.pull.close()
            self.pull = None
        super().stop(raise_error=raise_error)

    def _collect(self) -> None:
        """The server's tables into ``out``, then its folder removed."""
        try:
            proc = subprocess.run(
                self.server.command(["tar", "-C", self.remote_dir, "-cf", "-", "."]),
                capture_output=True,
                timeout=120,
            )
            if proc.returncode == 0:
                with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
                    tar.extractall(self.out, members=_plain(tar))
        finally:
            self.server.run(["rm", "-rf", self.remote_dir])


# New chunks of a server's samplers: the names this machine has (stdin) left out.
PULL_SCRIPT = """cd {folder} 2>/dev/null || exit 0
known=$(cat)
for f in */[0-9]*.parquet; do
  case "
$known
" in *"
$f
"*) ;; *) [ -e "$f" ] && echo "$f";; esac
done | tar -cf - -T -
"""


class ChunkPull:
    """Every ``flush_s``, the chunks a server's samplers saved since the last look, into
    ``<run_dir>/partial/<table>/<seq>-<writer>.parquet`` here with a ``server`` column,
    so a run killed with SIGKILL keeps that server's rows up to the last pull. A pull
    that fails is logged and tried again at the next; it never stops the run."""

    def __init__(
        self,
        server: Any,
        folder: str,
        run_dir: Path,
        writer: str,
        label: str,
        flush_s: float,
        offset_ns: int = 0,
        control_path: Path | None = None,
    ) -> None:
        self.server, self.folder, self.run_dir = server, folder, Path(run_dir)
        self.offset_ns = offset_ns
        # one ssh connection for every pull (a handshake a second costs CPU the run
        # needs): a master of our own, which dies with this process
        self.control_path = control_path if not server.is_local else None
        self.master: subprocess.Popen | None = None
        self.writer, self.label, self.flush_s = writer, label, flush_s
        self.known: set[str] = set()
        self.writers: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"chunks-{writer}", daemon=True)

    def start(self) -> ChunkPull:
        if self.control_path is not None:
            self.master = subprocess.Popen(
                [
                    *self.server.ssh_options(),
                    "-M",
                    "-N",
                    "-o",
                    f"ControlPath={self.control_path}",
                    self.server.dest,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        self._thread.start()
        return self

    def _command(self, line: str) -> list[str]:
        if self.control_path is None:
            return self.server.command(line)
        return [
            *self.server.ssh_options(),
            "-o",
            f"ControlPath={self.control_path}",
            "-o",
            "ControlMaster=no",
            self.server.dest,
            line,
        ]

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            try:
                self.pull_once()
            except (OSError, subprocess.SubprocessError, tarfile.TarError, ValueError) as exc:
                log.warning("chunks of %s not pulled: %s", self.server, exc)

    def pull_once(self) -> int:
        """Bring the new chunks here; returns how many."""
        known = "".join(f"{name}\n" for name in sorted(self.known)).encode()
        proc = subprocess.run(
            self._command(PULL_SCRIPT.format(folder=self.folder)),
            input=known,
            capture_output=True,
            timeout=30,
        )
        if proc.returncode != 0:
            raise OSError(proc.stderr.decode(errors="replace").strip() or f"exit {proc.returncode}")
        pulled = 0
        with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
            for member in sorted(_plain(tar), key=lambda m: m.name):
                name = member.name.removeprefix("./")
                table = Path(name).parts[0]
                data = tar.extractfile(member) if member.isfile() else None
                if data is None or len(Path(name).parts) != 2:
                    continue
                frame = pq.read_table(io.BytesIO(data.read())).to_pandas()
                if table not in self.writers:
                    self.writers[table] = ChunkWriter(self.run_dir, table, writer=self.writer)
                self.writers[table].append(
                    on_this_clock(frame, self.offset_ns).assign(server=self.label)
                )
                self.known.add(name)
                pulled += 1
        return pulled

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=40)
        if self.master is not None:
            self.master.terminate()
            try:
                self.master.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.master.kill()
                self.master.wait(timeout=5)
            self.master = None


def on_this_clock(table: pd.DataFrame, offset_ns: int) -> pd.DataFrame:
    """A server's rows with ``t_ns`` moved onto this machine's monotonic clock (the
    server's clock minus ``offset_ns``, ``experiments.orchestration.cluster``)."""
    if not offset_ns or "t_ns" not in table:
        return table
    return table.assign(t_ns=table["t_ns"] - int(offset_ns))


def _plain(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The members that are plain files or folders inside the archive's root (Debian's
    Python 3.11 predates ``extractall(filter=)``)."""
    out = []
    for m in tar.getmembers():
        parts = Path(m.name).parts
        if (m.isfile() or m.isdir()) and not m.name.startswith("/") and ".." not in parts:
            out.append(m)
    return out


class ClusterSamplers:
    """One sampler process per server of ``net`` (``place_of`` its switches), with the
    interface of ``SamplerProcess``: ``start``, ``stop``, ``table``, ``rates``."""

    def __init__(
        self,
        net: Any,
        folder: Path,
        queue_hz: float,
        *,
        chunks_dir: Path,
        flush_s: float,
        offsets_ns: dict[str, int] | None = None,
    ) -> None:
        # each server's rows are moved onto this machine's clock: its t_ns less its offset
        self.offsets_ns = dict(offsets_ns or {})
        fabric = net.fabric
        by_place: dict[str, dict[str, tuple[str, int]]] = {"": {}}
        for e in net.plan:
            if not fabric.node(e.node).is_host:
                by_place.setdefault(net.place_of(e.node), {})[net.intf(e.node, e.port)] = (
                    e.node,
                    e.port,
                )
        self.parts: dict[str, SamplerProcess] = {}
        for i, (place, ports) in enumerate(sorted(by_place.items())):
            if not place:
                self.parts[LOCAL] = SamplerProcess(
                    folder / "local",
                    ports,
                    queue_hz,
                    link_ports=ports,
                    chunks_dir=chunks_dir,
                    flush_s=flush_s,
                )
            else:
                remote = f"/tmp/kvf-samplers-{net.prefix}-{i}"
                self.parts[place] = RemoteSamplerProcess(
                    net.servers[place],
                    remote,
                    folder / f"server-{i}",
                    ports,
                    queue_hz,
                    link_ports=ports,
                    flush_s=flush_s,
                    chunks_dir=chunks_dir,
                    writer=f"s{i}",
                    label=place,
                    offset_ns=self.offsets_ns.get(place, 0),
                )

    def start(self) -> ClusterSamplers:
        try:
            for part in self.parts.values():
                part.start()
        except BaseException:
            self.stop(raise_error=False)
            raise
        return self

    def stop(self, raise_error: bool = True) -> None:
        errors = []
        for name, part in self.parts.items():
            try:
                part.stop(raise_error=raise_error)
            except SamplerError as exc:
                errors.append(f"{name}: {exc}")
        if errors and raise_error:
            raise SamplerError("; ".join(errors))

    def table(self, name: str) -> pd.DataFrame:
        frames = []
        for server, part in self.parts.items():
            t = part.table(name)
            if not t.empty:
                frames.append(
                    on_this_clock(t, self.offsets_ns.get(server, 0)).assign(server=server)
                )
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def rates(self) -> dict[str, dict[str, float]]:
        """Each sampler's rates, named ``<sampler>`` here and ``<sampler>@<server>`` on
        another server, so the verdict's ``sampler_rate`` judges every one."""
        out: dict[str, dict[str, float]] = {}
        for server, part in self.parts.items():
            for name, r in part.rates().items():
                out[name if server == LOCAL else f"{name}@{server}"] = r
        return out

    def __enter__(self) -> ClusterSamplers:
        return self.start()

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop(raise_error=exc_type is None)

"""The samplers of a fabric spread over servers: one sampler process on each server
that runs switches (its queues and links, and its CPU), and this machine's CPU
always (the coordinator and the agents it runs are here).

A server's samplers run there, through ssh, from the same path as here
(``kvfabric doctor --cluster`` checks it): the configuration goes over on stdin of
one ssh command, the tables come back as one tar stream when they stop, and the
server's folder is removed. Their rows gain a ``server`` column. A remote server's
rows are not saved as the run goes (``partial/``): a run killed with SIGKILL loses
them, and the report says so by their absence.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.measurement.sampler_process import SamplerError, SamplerProcess
from topologies.system import die_with_parent

LOCAL = "localhost"


class RemoteSamplerProcess(SamplerProcess):
    """``SamplerProcess`` on ``server`` (a ``topologies.cluster.ssh.Server``)."""

    def __init__(self, server: Any, remote_dir: str, *args: Any, **kwargs: Any) -> None:
        kwargs["chunks_dir"] = None  # a remote server's rows come back at stop only
        super().__init__(*args, **kwargs)
        self.server, self.remote_dir = server, remote_dir

    def start(self) -> RemoteSamplerProcess:
        self.out.mkdir(parents=True, exist_ok=True)
        config = dict(self.config, out=self.remote_dir, chunks=None)
        path = f"{self.remote_dir}/samplers.config.json"
        proc = self.server.run(f"umask 077 && mkdir -p {self.remote_dir} && cat > {path}",
                               stdin=json.dumps(config))  # fmt: skip
        if proc.returncode != 0:
            raise SamplerError(f"samplers on {self.server}: {proc.stderr.strip()}")
        root = str(Path(__file__).resolve().parents[2])
        argv = ["env", f"PYTHONPATH={root}", sys.executable, "-m",
                "experiments.measurement.sampler_process", path]  # fmt: skip
        with open(self.out / "samplers.log", "wb") as log:
            self.proc = subprocess.Popen(self.server.command(argv), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, text=True,
                                         preexec_fn=die_with_parent)  # fmt: skip
        self._await_ready()
        return self

    def _collect(self) -> None:
        """The server's tables into ``out``, then its folder removed."""
        try:
            proc = subprocess.run(self.server.command(["tar", "-C", self.remote_dir, "-cf", "-",
                                                       "."]),
                                  capture_output=True, timeout=120)  # fmt: skip
            if proc.returncode == 0:
                with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
                    tar.extractall(self.out, members=_plain(tar))
        finally:
            self.server.run(["rm", "-rf", self.remote_dir])


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

    def __init__(self, net: Any, folder: Path, queue_hz: float, *, chunks_dir: Path,
                 flush_s: float) -> None:  # fmt: skip
        fabric = net.fabric
        by_place: dict[str, dict[str, tuple[str, int]]] = {"": {}}
        for e in net.plan:
            if not fabric.node(e.node).is_host:
                by_place.setdefault(net.place_of(e.node), {})[net.intf(e.node, e.port)] = (
                    e.node, e.port)  # fmt: skip
        self.parts: dict[str, SamplerProcess] = {}
        for i, (place, ports) in enumerate(sorted(by_place.items())):
            if not place:
                self.parts[LOCAL] = SamplerProcess(folder / "local", ports, queue_hz,
                                                   link_ports=ports, chunks_dir=chunks_dir,
                                                   flush_s=flush_s)  # fmt: skip
            else:
                remote = f"/tmp/kvf-samplers-{net.prefix}-{i}"
                self.parts[place] = RemoteSamplerProcess(
                    net.servers[place], remote, folder / f"server-{i}", ports, queue_hz,
                    link_ports=ports, flush_s=flush_s)  # fmt: skip

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
                frames.append(t.assign(server=server))
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

"""Every integration test must leave no bridge or interface of a kvfabric run,
and no controller it started may have logged a traceback.

Runs owned by other live processes (another test session on the same
machine) are not this test's leftovers and are ignored.
"""

from __future__ import annotations

import os
import time

import pytest

from controller.process import LOG_COPY_ENV
from topologies.cleanup import bridges, interfaces, records
from topologies.naming import owned


def owned_leftovers() -> set[str]:
    others = {r.prefix for r in records() if r.owner_pid != os.getpid() and r.owner_alive()}
    return {
        n
        for n in bridges() + interfaces()
        if owned(n) and owned(n) not in others and not n.startswith("kfzz")
    }


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = owned_leftovers()
    yield
    after = owned_leftovers() - before
    assert not after, f"the test left kvfabric resources behind: {sorted(after)}"


@pytest.fixture(scope="session")
def controller_logs(tmp_path_factory) -> dict:
    """Every stopped controller copies its log here (``ControllerProcess``, also in
    ``kvfabric`` subprocesses, which inherit the variable), whatever its run
    directory was: the runner's and ``kvfabric cli``'s are deleted after the run."""
    folder = tmp_path_factory.mktemp("controller-logs")
    old = os.environ.get(LOG_COPY_ENV)
    os.environ[LOG_COPY_ENV] = str(folder)
    yield {"folder": folder, "checked": set()}
    if old is None:
        os.environ.pop(LOG_COPY_ENV, None)
    else:
        os.environ[LOG_COPY_ENV] = old


@pytest.fixture(autouse=True)
def no_controller_traceback(controller_logs, tmp_path):
    """Fail the test if a controller log written during it holds a traceback: the
    copies not checked yet (a module fixture's controllers are checked with the
    first test after them), and any ``controller.log`` under the test's
    ``tmp_path`` written since it started (a run's ``logs/``, a run directory)."""
    started = time.time()
    yield
    folder, checked = controller_logs["folder"], controller_logs["checked"]
    logs = [p for p in folder.glob("controller-*.log") if p not in checked]
    checked.update(logs)
    # depending on tmp_path keeps it alive until this check has read it
    logs += [p for p in tmp_path.rglob("controller.log") if p.stat().st_mtime >= started - 1]
    bad = [p for p in logs if "Traceback" in p.read_text(errors="replace")]
    if bad:
        first = bad[0].read_text(errors="replace")
        at = first.index("Traceback")
        pytest.fail(
            f"the controller logged an exception ({', '.join(map(str, bad))}):\n"
            + first[max(0, at - 300) : at + 3000],
            pytrace=False,
        )


_CLUSTER: dict = {}


@pytest.fixture
def local_cluster():
    """A 2-server local cluster (``kvfabric cluster local up 2``) shared by the tests of
    one fabric over several servers; a test that kills one of its servers leaves it for
    the next test to replace (``cluster_up``)."""
    from topologies.cluster.local import down

    rec = _CLUSTER.get("rec")
    if rec is None or not rec.holders_alive():
        if rec is not None:
            down(rec)
        _CLUSTER["rec"] = rec = cluster_up(2)
    return rec


def cluster_up(n: int):
    """``sudo kvfabric cluster local up N`` as a user runs it (its own process), and its
    record."""
    import subprocess
    import sys

    from topologies.cluster.local import cluster_records

    before = {r.prefix for r in cluster_records()}
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.cli.main", "cluster", "local", "up", str(n)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    (rec,) = [r for r in cluster_records() if r.prefix not in before]
    return rec


@pytest.fixture(scope="session", autouse=True)
def _local_cluster_removed():
    yield
    from topologies.cluster.local import down

    if _CLUSTER.get("rec") is not None:
        down(_CLUSTER.pop("rec"))


@pytest.fixture
def no_local_cluster():
    """The shared local cluster removed first (the tests of ``up`` itself)."""
    from topologies.cluster.local import down

    if _CLUSTER.get("rec") is not None:
        down(_CLUSTER.pop("rec"))


def left_on(server, prefix: str) -> list[str]:
    """What of run ``prefix`` a cluster server still has: its bridges, interfaces, TLS
    and agents' folders, Open vSwitch's SSL setting into that folder, and agent workers
    of the run (their spill path names it)."""
    out = server.run(
        f"ovs-vsctl list-br; ls /sys/class/net; ls -d /run/kvfabric-tls/{prefix}"
        f" /run/kvfabric-agents/{prefix} 2>/dev/null; ovs-vsctl get-ssl; "
        f"pgrep -af 'agents.worker.*/{prefix}/' | grep -v pgrep"
    ).stdout
    return [
        w
        for w in out.split()
        if w.startswith(prefix) or f"/{prefix}/" in w or w.endswith(f"/{prefix}")
    ]

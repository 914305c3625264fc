"""Names of what a run creates: every bridge, interface and Mininet node of a
run starts with its run prefix (``kf`` + two characters), so ``kvfabric clean``
can remove leftovers of kvfabric runs and nothing else."""

from __future__ import annotations

import re
import secrets
import string
from dataclasses import dataclass

from .fabric import Node

PREFIX_RE = r"kf[0-9a-z]{2}"
# Bridge (switch) or node name, optionally with an interface suffix.
OWNED_NAME = re.compile(rf"^(?P<prefix>{PREFIX_RE})[hs]\d+(-eth\d+)?$")
_ALPHABET = string.digits + string.ascii_lowercase
# Scratch devices of capability probes (``system``); never a run's prefix.
SCRATCH_PREFIX = "kfzz"


def new_prefix(taken: set[str] | None = None) -> str:
    """A fresh run prefix, neither in ``taken`` nor the probes' ``SCRATCH_PREFIX``."""
    taken = (taken or set()) | {SCRATCH_PREFIX}
    while True:
        prefix = "kf" + "".join(secrets.choice(_ALPHABET) for _ in range(2))
        if prefix not in taken:
            return prefix


@dataclass(frozen=True)
class RunNames:
    prefix: str

    def __post_init__(self) -> None:
        if not re.fullmatch(PREFIX_RE, self.prefix):
            raise ValueError(f"run prefix {self.prefix!r} must match {PREFIX_RE}")

    def node(self, node: Node) -> str:
        """Mininet node name (also the OVS bridge name of a switch)."""
        return f"{self.prefix}{'h' if node.is_host else 's'}{node.number}"

    def intf(self, node: Node, port: int) -> str:
        return f"{self.node(node)}-eth{port}"


def owned(name: str) -> str | None:
    """The run prefix if ``name`` is a kvfabric-owned bridge/interface, else None."""
    m = OWNED_NAME.match(name)
    return m.group("prefix") if m else None

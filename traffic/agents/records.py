"""What the agents record, one typed record per message end, shared by the worker
that writes them and the coordinator that merges them into ``flows.parquet``.

On disk (``collect``) a record is a JSON list in field order, so a run of
hundreds of thousands of messages stays compact; both ends name the fields
through these types, never by index.

Instants are ``time.monotonic_ns()`` taken in the process that saw the event
(all namespaces share the clock): ``t_issue`` when the send timer fired,
``t_start`` when the message's header was handed to the kernel (after the
messages ahead of it on a persistent connection), ``t_end`` when the read
holding its last byte was processed by the receiver.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple


class Sent(NamedTuple):
    """A message's sending end: written completely (``ok``) or failed, with why."""

    flow_id: int
    t_sched_ns: int
    t_issue_ns: int
    t_start_ns: int
    bytes: int
    ok: bool
    error: str


class Received(NamedTuple):
    """A message's receiving end: every byte arrived (``ok``, ``t_end_ns``), or the
    connection ended after ``bytes`` of it (``t_end_ns`` None, ``error`` says how)."""

    flow_id: int
    t_end_ns: int | None
    bytes: int
    t_send_ns: int
    peer: str
    ok: bool
    error: str


class Records(NamedTuple):
    """One worker's records: the hosts it served and every message end it saw."""

    hosts: list[str]
    cc: str
    sent: list[Sent]
    received: list[Received]


def records_doc(records: Records) -> dict[str, Any]:
    """``records`` as JSON-ready data (a file's content, or a ``collect`` reply's)."""
    return {
        "hosts": records.hosts,
        "cc": records.cc,
        "sent": records.sent,
        "recv": records.received,
    }


def write_records(path: str | Path, records: Records) -> None:
    with open(path, "w") as fh:
        json.dump(records_doc(records), fh, separators=(",", ":"))


def read_records(path: str | Path) -> Records:
    with open(path) as fh:
        return records_of(json.load(fh))


def records_of(doc: dict[str, Any]) -> Records:
    """The ``Records`` of ``records_doc``'s data."""
    return Records(
        doc["hosts"],
        doc["cc"],
        [Sent(*r) for r in doc["sent"]],
        [Received(*r) for r in doc["recv"]],
    )

"""``streamshift trace``: where a key's changes went, read without a JVM (deltalake).

For one key of one layer, every version the layer received, in the order it received them
(the apply's clock, then the line or offset), each with where it came from (``source`` and
``source_ref``: ``<file>:<line>`` or ``<topic>:<partition>:<offset>``; ``log_ref``: the message
that carried it when that is another, as for an EOD correction or a re-driven row once a flow
streams), when it was applied and its outcome:

* ``applied``: it became the key's current version (``current`` marks the one that still is);
* ``superseded``: a higher version of the key arrived in the same apply, so it never was;
* ``stale``: at or below a version received before it (out of order, or sent again): it
  changed nothing;
* ``quarantined``: refused by a rule (``rule``), from the quarantine;

and ``late`` where its business date was closed when it arrived. A version delivered again
(a re-sent message, a line repeated in a file, a file sent again under another name) is listed
at each delivery: history holds its first, the layer's redeliveries table the others, which
are ``stale``.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamshift.spec.contract import (
    APPLIED_AT,
    IS_DELETED,
    LOG_REF,
    REPLACEMENT_SOURCE,
    SOURCE,
    SOURCE_REF,
)
from streamshift.spec.stages import stage
from streamshift.store.records import current_stage
from streamshift.store.tables import rows

if TYPE_CHECKING:
    from streamshift.spec.catalog import LayerTables
    from streamshift.spec.flow import Flow
    from streamshift.spec.settings import Settings

APPLIED, SUPERSEDED, STALE, QUARANTINED = "applied", "superseded", "stale", "quarantined"
RESENT = "_resent"  # marks a row read from redeliveries (a later delivery of its version)
COLUMNS = ["version", "event_type", "source", "source_ref", "outcome", "rule", "late", "applied_at"]


@dataclass
class Trace:
    key: str
    layer: str
    current: dict[str, Any] | None
    events: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "layer": self.layer,
            "current": self.current,
            "events": self.events,
        }


def _order(ref: str | None) -> tuple[str, int]:
    """``file:line`` / ``topic:partition:offset`` → (its stem, its number), for receipt order."""
    head, _, tail = (ref or "").rpartition(":")
    return (head, int(tail)) if tail.isdigit() else (ref or "", 0)


def delivered_from(r: dict[str, Any]) -> str:
    """Where a stored row came from: its Kafka offset when the log delivered it, else its
    ``file:line``."""
    return str(r.get(LOG_REF) or r[SOURCE_REF])


def shown_ref(e: dict[str, Any]) -> str:
    """An answer's ``source_ref`` as text, with the message that carried it when another."""
    return str(e["source_ref"]) + (f" via {e['log_ref']}" if e.get("log_ref") else "")


def via_log(r: dict[str, Any]) -> str | None:
    """The message that carried a change whose ``source_ref`` names somewhere else (an EOD
    correction's ``file:line``, a re-driven row's first delivery), else None."""
    log = r.get(LOG_REF)
    return str(log) if log and log != r[SOURCE_REF] else None


def receipt_order(r: dict[str, Any]) -> tuple[Any, tuple[str, int]]:
    """The order a layer received history rows in: the apply's clock, then the line of a file
    or the offset of a partition."""
    return (r[APPLIED_AT], _order(delivered_from(r)))


def superseded(flow: Flow, r: dict[str, Any], history: list[dict[str, Any]]) -> bool:
    """Whether a higher version of ``r``'s key came in the same apply (``history``: the key's
    rows), so ``r`` never became current."""
    return any(
        h[APPLIED_AT] == r[APPLIED_AT] and h[flow.version] > r[flow.version] for h in history
    )


def outcomes(flow: Flow, ordered: list[dict[str, Any]]) -> list[str]:
    """Each of one key's history rows' outcome, ``ordered`` in receipt order: ``stale`` at or
    below a version received before it (it changed nothing), ``superseded`` when a higher
    version came in the same apply, else ``applied`` (it became the current version)."""
    found: list[str] = []
    highest = None
    for r in ordered:
        # A replacement's synthetic cancel ranks below a real event of its version number.
        rank = (r[flow.version], r[SOURCE] != REPLACEMENT_SOURCE)
        if highest is not None and rank <= highest:
            found.append(STALE)
            continue
        found.append(SUPERSEDED if superseded(flow, r, ordered) else APPLIED)
        highest = rank
    return found


def trace_link(flow: str, key: object, layer: str | None = None) -> str:
    """The Migration page's address of a key's trace, relative to the page."""
    from urllib.parse import quote

    link = f"trace?flow={quote(flow, safe='')}&key={quote(str(key), safe='')}"
    return f"{link}&layer={layer}" if layer else link


def _holds_key(payload: str | None, flow: Flow, key: str) -> bool:
    """Whether a quarantined payload (a JSON message or a file's CSV line) is of ``key``."""
    if not payload:
        return False
    try:
        message = json.loads(payload)
    except ValueError:
        message = None
    if isinstance(message, dict):
        return str(message.get(flow.key)) == key
    return key in next(csv.reader(io.StringIO(payload)), [])


def _version_of(payload: str | None, flow: Flow) -> Any:
    try:
        message = json.loads(payload or "")
    except ValueError:
        return None
    return message.get(flow.version) if isinstance(message, dict) else None


def default_layer(settings: Settings, flow: str) -> str:
    """The layer a trace reads unless told: the one serving readers in the flow's stage (the
    batch layer in shadow, where closed dates are served from it)."""

    return serving_layer_of(current_stage(settings, flow))


def serving_layer_of(stage_name: str) -> str:
    """The layer that serves readers in stage ``stage_name`` (see :func:`default_layer`)."""

    return "stream" if stage(stage_name).serves == "stream" else "batch"


def trace(flow: Flow, tables: LayerTables, key: str) -> Trace:
    """The key's deliveries to the layer of ``tables`` (see the module's note)."""
    layer = tables.layer
    group_columns = flow.group_columns
    where = [(flow.key, "=", key)]
    found = rows(tables.current, where=where)
    now = found[0] if found else None
    history = rows(tables.history, where=where)
    again = rows(tables.redeliveries, where=where)
    for r in again:
        r[RESENT] = True
    history += again
    late = {
        (r["version"], r["source"])
        for r in rows(tables.late_events, where=[("flow", "=", flow.name), ("key", "=", key)])
    }
    history.sort(key=receipt_order)
    events = []
    for r, outcome in zip(history, outcomes(flow, history), strict=True):
        events.append(
            {
                "version": r[flow.version],
                "event_type": r.get("event_type"),
                "source": r[SOURCE],
                "source_ref": r[SOURCE_REF],
                "log_ref": via_log(r),
                "outcome": outcome,
                "rule": None,
                "late": (r[flow.version], r[SOURCE]) in late,
                "applied_at": r[APPLIED_AT],
                "current": now is not None
                and not r.get(RESENT)
                and r[flow.version] == now[flow.version]
                and r[SOURCE] == now[SOURCE],
                "groups": {c: r[c] for c in group_columns} if outcome == APPLIED else {},
            }
        )
    # (filtered here, not by LIKE, whose escape character a key may hold)
    refused = rows(tables.quarantine, where=[("flow", "=", flow.name)])
    for q in sorted(refused, key=lambda q: (q["quarantined_at"], _order(q["source_ref"]))):
        if _holds_key(q["raw_payload"], flow, key):
            events.append(
                {
                    "version": _version_of(q["raw_payload"], flow),
                    "event_type": None,
                    "source": q["source"],
                    "source_ref": q["source_ref"],
                    "log_ref": None,
                    "outcome": QUARANTINED,
                    "rule": q["rule"],
                    "late": False,
                    "applied_at": q["quarantined_at"],
                    "current": False,
                    "groups": {},
                }
            )
    current = None
    if now is not None:
        current = {
            "version": now[flow.version],
            "deleted": bool(now.get(IS_DELETED)),
            "source": now[SOURCE],
            "source_ref": now[SOURCE_REF],
            "log_ref": via_log(now),
            "applied_at": now[APPLIED_AT],
        }
    return Trace(key, layer, current, events)


def table_rows(found: Trace) -> list[list[str]]:
    """The trace as text rows of :data:`COLUMNS` (``applied*``: the current version)."""
    out = []
    for e in found.events:
        outcome = e["outcome"] + ("*" if e["current"] else "")
        values = {
            **e,
            "source_ref": shown_ref(e),
            "outcome": outcome,
            "late": "late" if e["late"] else "",
        }
        out.append(["" if values[c] is None else str(values[c]) for c in COLUMNS])
    return out

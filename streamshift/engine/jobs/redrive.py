"""Re-drive the quarantine: ``run(spark, request)`` (``streamshift redrive``).

Once a quarantined row's cause is fixed (reference data that lacked its book, a rule that was
wrong), the row is applied as it was received: its payload is read back into the flow's
columns, checked with today's rules and reference data, and the rows that pass now are
applied with source ``redrive`` and their original ``source_ref`` (so a key's trace shows
the quarantine and the re-driven version side by side). In the stream layer they go through
the flow's topic like every change once a flow streams (:mod:`streamshift.engine.jobs.through_log`);
in the batch layer they go through the write path directly.

Every re-driven row's outcome is a row of ``control/redrives`` (applied, or still failing
with the rules it fails now), one per quarantined row: a second run skips what was applied
and tries again what still fails. The write path keeps one copy of each version anyway, so
a run killed half-way and run again applies nothing twice.

Conflicting versions (``version_conflict``) are not re-driven: the first delivery of a version
stays, whatever is fixed. Payloads no reader could decode stay too.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from streamshift.control.trace import default_layer
from streamshift.engine.write.commits import merge_into
from streamshift.engine.write.target import Target, ensure_table
from streamshift.engine.write.transforms import checked_changes, raw_schema
from streamshift.spec import sqltext as sql
from streamshift.spec.catalog import REDRIVES_SCHEMA, ControlTables
from streamshift.spec.contract import FAILED, RAW, SOURCE, SOURCE_REF
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.requests import RedriveRequest
from streamshift.store.processes import os_user
from streamshift.store.quarantine import APPLIED, STILL_FAILING, UNREADABLE, pending
from streamshift.store.tables import rows as table_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamshift.control.jobs import JobContext
    from streamshift.spec.flow import Flow

REDRIVE = "redrive"
# Passed here, refused by a stream job that still holds the reference data it started with.
STREAM_REFUSED = "refused by the stream job (restart it to read the fixed reference data)"


class RedriveError(StreamshiftError):
    final = True


@dataclass(frozen=True)
class RedriveResult:
    request: RedriveRequest
    layer: str
    tried: int
    applied: int
    still_failing: dict[str, int] = field(default_factory=dict)
    unreadable: int = 0
    seconds: float = 0.0

    def describe(self) -> str:
        r = self.request
        scope = ", ".join(
            f"{k} {v}" for k, v in (("rule", r.rule), ("date", r.business_date)) if v is not None
        )
        head = f"{r.flow} quarantine of the {self.layer} layer{f' ({scope})' if scope else ''}"
        if not self.tried:
            return f"{head}: nothing to re-drive"
        text = f"{head}: {self.applied} of {self.tried} rows re-driven and applied"
        if self.still_failing:
            rules = ", ".join(f"{n} {rule}" for rule, n in sorted(self.still_failing.items()))
            text += f"; still failing, left in quarantine: {rules}"
        if self.unreadable:
            text += f"; {self.unreadable} payloads no reader can split stay"
        return text + f" ({self.seconds:.1f}s)"


def _header(path: Path, flow: Flow) -> list[str]:
    """The columns of a file's lines: its header when the file is still there."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            return [c.strip().lower() for c in next(csv.reader(handle))]
    except (OSError, StopIteration):
        return flow.columns


def _raw_row(
    flow: Flow, q: dict[str, Any], headers: dict[Path, list[str]]
) -> dict[str, str | None] | None:
    """A quarantined payload back in the flow's columns as text; None when unreadable.
    ``headers``: the files' headers read so far (each file is read once per run)."""
    payload = q["raw_payload"] or ""
    if payload.startswith("base64:"):
        return None  # a message no decoder could read
    try:
        message = json.loads(payload)
    except ValueError:
        message = None
    if isinstance(message, dict):
        values = {c: message.get(c) for c in flow.columns}
        return {c: None if v is None else str(v) for c, v in values.items()}
    fields = next(csv.reader(io.StringIO(payload)), [])
    path = Path(q["source_ref"].rpartition(":")[0])
    if path not in headers:
        headers[path] = _header(path, flow)
    header = headers[path]
    if len(fields) != len(header):
        return None
    by_name = dict(zip(header, fields, strict=True))
    return {c: by_name.get(c) for c in flow.columns}


def run(spark: SparkSession, context: JobContext, request: RedriveRequest) -> RedriveResult:
    """Re-drive the request's quarantined rows (see the module's note)."""
    started = time.monotonic()
    settings, flow = context.settings, context.flow
    layer = request.layer or default_layer(settings, flow.name)
    target = Target.open(spark, settings, flow, layer)
    rows = pending(settings, flow.name, layer, request.rule, request.business_date)
    outcomes: list[tuple[dict[str, Any], str, str | None]] = []
    readable = []
    headers: dict[Path, list[str]] = {}
    for q in rows:
        raw = _raw_row(flow, q, headers)
        if raw is None:
            outcomes.append((q, UNREADABLE, q["rule"]))
        else:
            readable.append({**raw, SOURCE_REF: q["source_ref"], RAW: q["raw_payload"]})
    applied = 0
    still: dict[str, int] = {}
    if readable:
        schema = raw_schema(flow)
        frame = spark.createDataFrame(
            [tuple(r.get(f.name) for f in schema.fields) for r in readable], schema
        ).withColumn(SOURCE, F.lit(REDRIVE))
        checked = checked_changes(flow, frame, target.reference).select(SOURCE_REF, FAILED)
        failing = {r[SOURCE_REF]: list(r[FAILED]) for r in checked.collect() if r[FAILED]}
        passing = [r for r in readable if r[SOURCE_REF] not in failing]
        for q in rows:
            rules = failing.get(q["source_ref"])
            if rules is not None:
                outcomes.append((q, STILL_FAILING, ",".join(rules)))
                still[rules[0]] = still.get(rules[0], 0) + 1
        if passing:
            refused = _apply(spark, settings, flow, target, frame, passing)
            refs = {r[SOURCE_REF] for r in passing} - refused
            applied = len(refs)
            outcomes += [(q, APPLIED, None) for q in rows if q["source_ref"] in refs]
            if refused:
                outcomes += [(q, STILL_FAILING, STREAM_REFUSED) for q in rows
                             if q["source_ref"] in refused]  # fmt: skip
                still[STREAM_REFUSED] = len(refused)
    _record(spark, settings, flow, layer, outcomes, request.by or os_user())
    return RedriveResult(
        request,
        layer,
        tried=len(rows),
        applied=applied,
        still_failing=still,
        unreadable=sum(1 for _, o, _ in outcomes if o == UNREADABLE),
        seconds=time.monotonic() - started,
    )


def _apply(spark, settings, flow, target, frame, passing) -> set[str]:  # type: ignore[no-untyped-def]
    """The rows that pass now: through the topic in the stream layer, else the write path.
    Returns the source_refs of rows that did not land (the stream job refused them)."""
    from streamshift.engine.write.apply import apply_changes

    refs = [r[SOURCE_REF] for r in passing]
    if target.tables.layer != "stream":
        apply_changes(flow, frame.where(F.col(SOURCE_REF).isin(refs)), REDRIVE, target)
        return set()
    from streamshift.engine.jobs.through_log import NotApplied, produce_and_wait

    rows = [{**{c: r[c] for c in flow.columns}, SOURCE: REDRIVE, SOURCE_REF: r[SOURCE_REF]}
            for r in passing]  # fmt: skip
    try:
        produce_and_wait(settings, flow, "stream", rows, "re-driven rows")
    except NotApplied as e:
        raise RedriveError(str(e)) from None
    # The stream job checks them with the reference data it read when it started.
    keys = sorted({str(r[flow.key]).strip() for r in passing})
    now = {
        str(c[flow.key]): int(c[flow.version])
        for c in table_rows(target.tables.current, [flow.key, flow.version],
                            where=[(flow.key, "in", keys)])
    }  # fmt: skip
    return {
        r[SOURCE_REF]
        for r in passing
        if now.get(str(r[flow.key]).strip(), -1) < int(str(r[flow.version]).strip())
    }


def _record(spark, settings, flow, layer, outcomes, by) -> None:  # type: ignore[no-untyped-def]
    """One row per quarantined row tried, updated by each later re-drive of it."""
    if not outcomes:
        return
    path = ControlTables(settings.warehouse).redrives
    ensure_table(spark, path, REDRIVES_SCHEMA)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    data = [
        (flow.name, layer, q["source_ref"], q["rule"], q["business_date"], outcome, rules, now, by)
        for q, outcome, rules in outcomes
    ]
    same = sql.TRUE
    for c in ("flow", "layer", "source_ref"):
        same = same & sql.col(c, "t").eq_null_safe(sql.col(c, "s"))
    merge_into(path, spark.createDataFrame(data, REDRIVES_SCHEMA), same, update="*", insert="*")

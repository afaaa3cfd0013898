"""``streamshift explain``: why one row of a view is what it is, read without a JVM (deltalake).

For one group of a view (``--date`` and the group's columns) in one layer:

* ``row``: the view's row, as stored;
* ``measures``: how each measure comes from the group's members, by the kind the view declares
  (:class:`~streamshift.spec.flow.Measure`): a sum or a count adds up the members'
  contributions (``members_total``, before the measure's rounding); a minimum or a maximum
  names the member that sets it (``set_by``); a mean gives its sum and count;
* ``members``: the live keys in the group now, each with its version, where that version came
  from and its contribution to each measure;
* ``changes``: the applied versions that moved the group, newest first, each with its
  ``source_ref`` and what it did (``entered``, ``left`` or ``changed`` the group) and, for
  sums and counts, the delta it made. They come from history, so a key that left the group is
  still there; ``--changes`` pages them.

A version changes a group only where it became current: one that a higher version beat in the
same apply, or that arrived at or below a version already received, moved nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any

from streamshift.control.trace import (
    APPLIED,
    default_layer,
    outcomes,
    receipt_order,
    shown_ref,
    via_log,
)
from streamshift.spec.catalog import LayerTables
from streamshift.spec.contract import APPLIED_AT, IS_DELETED, LOG_REF, SOURCE, SOURCE_REF
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import COUNT, MAX, MEAN, MIN, SUM
from streamshift.spec.registry import get_flow
from streamshift.store.tables import column_names, rows
from streamshift.store.versions import live_tables

if TYPE_CHECKING:
    from streamshift.spec.flow import Flow, Measure, View
    from streamshift.spec.settings import Settings

ENTERED, LEFT, CHANGED = "entered", "left", "changed"
MEMBER_COLUMNS = ["key", "version", "source_ref", "contribution"]
CHANGE_COLUMNS = ["applied_at", "key", "version", "event_type", "moved", "source_ref", "delta"]


class ExplainError(StreamshiftError):
    final = True


@dataclass
class Explanation:
    flow: str
    layer: str
    view: str
    group: dict[str, Any]
    row: dict[str, Any] | None
    measures: list[dict[str, Any]] = field(default_factory=list)
    members: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    changes_total: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "layer": self.layer,
            "view": self.view,
            "group": self.group,
            "row": self.row,
            "measures": self.measures,
            "members": self.members,
            "changes": self.changes,
            "changes_total": self.changes_total,
        }


def parse_group(view: View, business_date_column: str, text: str) -> dict[str, str]:
    """``col=val,col=val`` naming every column of the view's group but the business date."""
    wanted = [c for c in view.group_key if c != business_date_column]
    given: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep:
            raise ExplainError(f"--group: {part!r} is not col=value (e.g. {wanted[0]}=...)")
        given[name.strip()] = value.strip()
    missing, unknown = [c for c in wanted if c not in given], [c for c in given if c not in wanted]
    if missing or unknown:
        said = [
            f"{what}: {', '.join(names)}"
            for what, names in (("missing", missing), ("unknown", unknown))
            if names
        ]
        raise ExplainError(
            f"--group must name {', '.join(wanted)} of view {view.name} ({'; '.join(said)})"
        )
    return given


def _typed(text: str, like: Any) -> Any:
    """``text`` as the Python type of a stored value ``like`` (what deltalake returns)."""
    if isinstance(like, dt.datetime):
        return dt.datetime.fromisoformat(text.replace("Z", "")).replace(tzinfo=None)
    if isinstance(like, dt.date):
        return dt.date.fromisoformat(text)
    if isinstance(like, bool):
        return text.lower() in ("true", "1")
    if isinstance(like, int):
        return int(text)
    if isinstance(like, Decimal):
        return Decimal(text)
    if isinstance(like, float):
        return float(text)
    return text


def _contribution(measure: Measure, member: dict[str, Any]) -> Any:
    return 1 if measure.kind == COUNT else member.get(measure.column or "")


def _rounded(measure: Measure, total: Any) -> Any:
    if measure.scale is None or not isinstance(total, Decimal):
        return total
    return total.quantize(Decimal(1).scaleb(-measure.scale), rounding=ROUND_HALF_UP)


def _measures(view: View, row: dict[str, Any] | None, members: list[dict[str, Any]], key: str):  # type: ignore[no-untyped-def]
    out = []
    for m in view.measures:
        stored = None if row is None else row.get(m.name)
        entry: dict[str, Any] = {"measure": m.name, "kind": m.kind, "value": stored}
        values = [(v, r[key]) for r in members if (v := _contribution(m, r)) is not None]
        if m.kind in (SUM, COUNT):
            total = sum((v for v, _ in values), start=0)
            entry["members_total"] = total
            entry["adds_up"] = stored is not None and _rounded(m, total) == stored
        elif m.kind in (MIN, MAX) and values:
            best = (min if m.kind == MIN else max)(v for v, _ in values)
            entry["set_by"] = sorted(k for v, k in values if v == best)
            entry["adds_up"] = best == stored
        elif m.kind == MEAN and values:
            total, count = sum(v for v, _ in values), len(values)
            entry["sum"], entry["count"] = total, count
            mean = total / count
            entry["adds_up"] = stored is not None and abs(mean - stored) < Decimal("1e-6") * max(
                1, abs(stored)
            )
        out.append(entry)
    return out


def _effective(flow: Flow, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The versions of one key that became current, in receipt order."""
    ordered = sorted(history, key=receipt_order)
    return [r for r, o in zip(ordered, outcomes(flow, ordered), strict=True) if o == APPLIED]


def explain(
    flow: Flow,
    tables: LayerTables,
    view_name: str,
    business_date: dt.date,
    group: dict[str, str],
    *,
    changes: int = 20,
    skip: int = 0,
) -> Explanation:
    """Explain the row of ``view_name`` for ``business_date`` and ``group`` (see the module)."""
    view = flow.view(view_name)
    if not view.measures:
        raise ExplainError(
            f"view {view.name} of flow {flow.name} declares no measures, so how a member "
            "makes its value is unknown; declare it with View.of_measures(...)"
        )
    bd = flow.business_date
    day = [(bd, "=", business_date)]
    [sample] = (
        rows(tables.view(view.name), where=day, limit=1)
        or rows(tables.current, where=day, limit=1)
        or [{}]
    )
    wanted = {c: _typed(v, sample.get(c)) for c, v in group.items()}
    wanted[bd] = business_date
    # Read only the group: its text and date columns filter in the query (a day of a big
    # flow holds millions of rows); the others (a timestamp, a number) in Python.
    where = day + [(c, "=", v) for c, v in group.items() if isinstance(wanted[c], str)]

    def in_group(r: dict[str, Any] | None) -> bool:
        return r is not None and all(r.get(c) == v for c, v in wanted.items())

    # Only the columns an answer shows: a big group's members are thousands of rows.
    wanted_columns = {flow.key, flow.version, "event_type", SOURCE, SOURCE_REF, LOG_REF,
                      APPLIED_AT, IS_DELETED, *flow.group_columns,
                      *(m.column for m in view.measures if m.column)}  # fmt: skip
    columns = [c for c in column_names(tables.current) if c in wanted_columns] or None
    found = [r for r in rows(tables.view(view.name), where=where) if in_group(r)]
    row = found[0] if found else None
    live = [
        r
        for r in rows(tables.current, columns, where=where)
        if in_group(r) and not r.get(IS_DELETED)
    ]
    live.sort(key=lambda r: str(r[flow.key]))
    members = [
        {
            "key": r[flow.key],
            "version": r[flow.version],
            "source": r[SOURCE],
            "source_ref": r[SOURCE_REF],
            "log_ref": via_log(r),
            "contribution": {m.name: _contribution(m, r) for m in view.measures},
        }
        for r in live
    ]

    # Every key that was ever in the group on its date, then every version of those keys: a
    # version that moved a key out of the group (to another book, or another date) counts too.
    in_day = rows(tables.history, [flow.key, *wanted], where=where)
    keys = sorted({str(r[flow.key]) for r in in_day if in_group(r)})
    # The key range as well as the keys: the range lets the reader skip every file whose key
    # statistics lie outside it (an IN list of thousands does not), and keys that carry their
    # date (as most desks' ids do) keep a day's range to that day's files.
    history = (
        rows(
            tables.history,
            columns,
            where=[(flow.key, ">=", keys[0]), (flow.key, "<=", keys[-1]), (flow.key, "in", keys)],
        )
        if keys
        else []
    )
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in history:
        by_key.setdefault(str(r[flow.key]), []).append(r)
    moves = []
    additive = [m for m in view.measures if m.additive]
    for key in keys:
        before: dict[str, Any] | None = None
        for r in _effective(flow, by_key.get(key, [])):
            was = in_group(before) and not before.get(IS_DELETED)  # type: ignore[union-attr]
            now = in_group(r) and not r.get(IS_DELETED)
            if was or now:
                delta = {}
                for m in additive:
                    old = _contribution(m, before) if was else 0  # type: ignore[arg-type]
                    new = _contribution(m, r) if now else 0
                    delta[m.name] = (new or 0) - (old or 0)
                moves.append(
                    {
                        "key": key,
                        "version": r[flow.version],
                        "event_type": r.get("event_type"),
                        "source": r[SOURCE],
                        "source_ref": r[SOURCE_REF],
                        "log_ref": via_log(r),
                        "applied_at": r[APPLIED_AT],
                        "moved": CHANGED if was and now else (ENTERED if now else LEFT),
                        "delta": delta,
                        "_order": receipt_order(r),
                    }
                )
            before = r
    moves.sort(key=lambda c: c.pop("_order"), reverse=True)
    return Explanation(
        flow=flow.name,
        layer=tables.layer,
        view=view.name,
        group={**group, bd: business_date},
        row=row,
        measures=_measures(view, row, live, flow.key),
        members=members,
        changes=moves[skip : skip + changes] if changes else moves[skip:],
        changes_total=len(moves),
    )


def explain_in(
    settings: Settings,
    flow_name: str,
    view_name: str | None,
    business_date: dt.date,
    group_text: str,
    layer: str | None = None,
    *,
    changes: int = 20,
    skip: int = 0,
) -> Explanation:
    """:func:`explain` as a user asks it (the CLI, the Migration page): the view by name (the
    flow's first by default), the group as ``col=val,...``, the layer serving readers in the
    flow's stage unless one is named. Raises :class:`ExplainError` saying what is wrong."""

    flow = get_flow(flow_name)
    try:
        view = flow.view(view_name) if view_name else flow.views[0]
    except KeyError as e:
        raise ExplainError(str(e.args[0])) from None
    return explain(
        flow,
        live_tables(settings.warehouse, flow, layer or default_layer(settings, flow.name)),
        view.name,
        business_date,
        parse_group(view, flow.business_date, group_text),
        changes=changes,
        skip=skip,
    )


def _text(value: Any, signed: bool = False) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_signed(v) if signed else v}" for k, v in value.items())
    return "" if value is None else str(value)


def _signed(value: Any) -> str:
    return f"+{value}" if isinstance(value, int | Decimal | float) and value > 0 else str(value)


def member_rows(found: Explanation) -> list[list[str]]:
    return [
        [_text({**m, "source_ref": shown_ref(m)}[c]) for c in MEMBER_COLUMNS] for m in found.members
    ]


def change_rows(found: Explanation) -> list[list[str]]:
    return [
        [_text({**c, "source_ref": shown_ref(c)}[name], signed=True) for name in CHANGE_COLUMNS]
        for c in found.changes
    ]


def measure_lines(found: Explanation) -> list[str]:
    """One line per measure: its value and how the members make it."""
    out = []
    for m in found.measures:
        line = f"{m['measure']} = {m['value']} ({m['kind']}"
        if "members_total" in m:
            line += f" of the members: {m['members_total']}"
        if "set_by" in m:
            line += f", set by {', '.join(m['set_by'])}"
        if "count" in m:
            line += f": sum {m['sum']} over {m['count']}"
        line += ")"
        if m.get("adds_up") is False:
            line += "  <- NOT what its members make: the view is out of step with current state"
        out.append(line)
    return out

"""What changed in a flow since the version its tables were written by, and what each change
needs: the plan ``streamshift plan`` prints and ``streamshift evolve`` applies (no Spark).

A flow's version is recorded as its *components* (:func:`streamshift.engine.versions.components`):
the columns and their types, the key, version, event-time and business-date columns, the
optional columns' defaults, the reference tables' schemas, and a digest of the analysed plan of
each rule, of ``deleted``, of ``prepare`` and of each view, built on empty frames. Two versions
are compared component by component here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# What a change needs, from the cheapest.
IN_PLACE = "in place"  # any job applies it itself: an optional column added
RECORD = "record"  # nothing to write: the new version is recorded (applies to new changes)
RECOMPUTE = "recompute"  # a view recomputed for every date from current state
REWRITE = "rewrite"  # the flow's state tables rewritten (a type widened)
REAPPLY = "reapply"  # history re-applied through the new code (``--reapply``)
BREAKING = "breaking"  # refused: a new flow, filled from history or a replay
NEEDS = (IN_PLACE, RECORD, RECOMPUTE, REWRITE, REAPPLY, BREAKING)
NEEDS_TEXT = {
    IN_PLACE: "in place: the next job (or evolve) alters the tables",
    RECORD: "applies to new changes (with evolve --reapply, rules re-check history too)",
    RECOMPUTE: "the view is recomputed for every date from current state",
    REWRITE: "current state and history are rewritten with the wider type (the JVM-free "
    "reads' deltalake does not read Delta's type widening)",
    REAPPLY: "history must be re-applied through the new code",
    BREAKING: "breaking: refused",
}

# Types a column may widen to (the casts Delta's type widening allows): from → to.
_WIDER = {
    "tinyint": {"smallint", "int", "bigint", "double"},
    "smallint": {"int", "bigint", "double"},
    "int": {"bigint", "double"},
    "float": {"double"},
    "date": {"timestamp_ntz"},
}


def widens(old: str, new: str) -> bool:
    """Whether a column of type ``old`` widens to ``new`` (every value casts exactly)."""
    if new in _WIDER.get(old, set()):
        return True
    if old.startswith("decimal(") and new.startswith("decimal("):
        (p1, s1), (p2, s2) = (tuple(int(x) for x in t[8:-1].split(",")) for t in (old, new))
        return s2 >= s1 and p2 - s2 >= p1 - s1 and (p2, s2) != (p1, s1)
    return False


@dataclass(frozen=True)
class Change:
    subject: str  # "column venue", "rule notional_positive", "view positions"
    what: str  # what changed, in words
    needs: str  # one of NEEDS

    def describe(self) -> str:
        return f"{self.subject}: {self.what} → {NEEDS_TEXT[self.needs]}"


@dataclass(frozen=True)
class Plan:
    flow: str
    layer: str
    deployed: int | None  # the recorded version (None: nothing recorded yet)
    changes: tuple[Change, ...]

    @property
    def breaking(self) -> bool:
        return any(c.needs == BREAKING for c in self.changes)

    @property
    def in_place(self) -> bool:
        """Nothing but changes any job applies itself (or nothing at all)."""
        return all(c.needs == IN_PLACE for c in self.changes)

    @property
    def needs_reapply(self) -> bool:
        return any(c.needs == REAPPLY for c in self.changes)

    def summary(self) -> str:
        """The changes in one line (the refusal a writing job gives)."""
        return "; ".join(f"{c.subject} ({c.what})" for c in self.changes)

    def describe(self) -> str:
        since = f"version {self.deployed}" if self.deployed else "nothing recorded"
        if not self.changes and not self.deployed:
            return (
                f"{self.flow}, {self.layer} layer: no version recorded yet (its first write "
                "records the code on disk as version 1)"
            )
        if not self.changes:
            return f"{self.flow}, {self.layer} layer: no change since {since}"
        lines = [f"{self.flow}, {self.layer} layer: {len(self.changes)} changes since {since}"]
        lines += [f"  {c.describe()}" for c in self.changes]
        if self.breaking:
            lines.append(
                "  breaking: refused. Leave the flow as deployed and build the change as a new "
                "flow, filled from history (streamshift replay) or from its files"
            )
        elif not self.in_place:
            lines.append(f"  apply with: streamshift evolve --flow {self.flow}")
        return "\n".join(lines)


def _columns(components: dict[str, Any]) -> dict[str, str]:
    return {name: kind for name, kind in components["columns"]}


def diff(
    flow: str,
    layer: str,
    deployed: int | None,
    old: dict[str, Any],
    new: dict[str, Any],
    over_old_inputs: dict[str, Any] | None,
) -> Plan:
    """The plan from ``old`` (recorded) to ``new`` (the code on disk). ``over_old_inputs``: the
    new code's components built over the old version's columns (None when the columns did not
    change), so a column added to the input does not read as every plan changing."""
    changes: list[Change] = []
    before, after = _columns(old), _columns(new)
    optional = new.get("optional", {})
    for name, kind in after.items():
        if name not in before:
            if name in optional:
                default = optional[name]
                changes.append(
                    Change(
                        f"column {name}",
                        f"added ({kind}, optional, default {default if default is not None else 'null'})",
                        IN_PLACE,
                    )
                )
            else:
                changes.append(
                    Change(
                        f"column {name}",
                        f"added ({kind}) without a default, so files and events from "
                        f"before the change would be refused: declare it optional "
                        f"(Flow(optional={{{name!r}: None}}))",
                        BREAKING,
                    )
                )
        elif before[name] != kind:
            widened = widens(before[name], kind)
            changes.append(
                Change(
                    f"column {name}",
                    f"type {'widened' if widened else 'changed'} {before[name]} → {kind}",
                    REWRITE if widened else BREAKING,
                )
            )
    for name in before:
        if name not in after:
            changes.append(Change(f"column {name}", "dropped or renamed", BREAKING))
    for role in ("key", "version", "business_date", "event_time"):
        if old[role] != new[role]:
            changes.append(
                Change(
                    f"the {role.replace('_', '-')} column", f"{old[role]} → {new[role]}", BREAKING
                )
            )
    for name, default in optional.items():
        if name in before and old.get("optional", {}).get(name, "<required>") != default:
            changes.append(Change(f"column {name}", f"optional with default {default!r}", RECORD))
    if old["reference"] != new["reference"]:
        changes.append(Change("reference data", "its tables' schemas changed", RECORD))
    logic = over_old_inputs or new
    if old["deleted"] != logic["deleted"]:
        changes.append(Change("deleted", "the retraction condition changed", RECORD))
    for name in sorted(set(old["rules"]) | set(logic["rules"])):
        was, now = old["rules"].get(name), logic["rules"].get(name)
        if was != now:
            what = "added" if was is None else "removed" if now is None else "changed"
            changes.append(Change(f"rule {name}", what, RECORD))
    if old["prepare"] != logic["prepare"]:
        derived = [
            n
            for n, _ in new["state"]
            if n not in {m for m, _ in old["state"]} and n not in optional
        ]
        if derived:
            changes.append(
                Change(
                    "prepare",
                    f"changed, deriving {', '.join(derived)} (rows stored before would hold "
                    "null under it)",
                    REAPPLY,
                )
            )
        else:
            changes.append(Change("prepare", "changed", RECORD))
    for name in sorted(set(old["views"]) | set(logic["views"])):
        was, now = old["views"].get(name), logic["views"].get(name)
        if was == now:
            continue
        if was is None:
            changes.append(Change(f"view {name}", "added", RECOMPUTE))
        elif now is None:
            changes.append(
                Change(f"view {name}", "removed (its table stays, no longer kept)", RECORD)
            )
        else:
            what = "group columns changed" if was["group"] != now["group"] else "logic changed"
            changes.append(Change(f"view {name}", what, RECOMPUTE))
    return Plan(flow, layer, deployed, tuple(changes))

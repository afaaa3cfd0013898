"""The flow spec: everything a flow declares once and both batch and stream use.

A flow module in ``flows/`` builds one :class:`Flow`. Nothing here reads or writes data;
the write path (:mod:`streamshift.engine.write.apply`) drives the flow's pure functions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

Reference = Mapping[str, "DataFrame"]


@dataclass(frozen=True)
class Rule:
    """A named row-level rule. ``passes()`` is true for a good row (null counts as failing)."""

    name: str
    passes: Callable[[], Column]
    description: str = ""


SUM, COUNT, MIN, MAX, MEAN = "sum", "count", "min", "max", "mean"
MEASURE_KINDS = (SUM, COUNT, MIN, MAX, MEAN)
ADDITIVE_KINDS = (SUM, COUNT)


@dataclass(frozen=True)
class Measure:
    """One column of a view: an aggregate of ``column`` over a group's live rows, by ``kind``
    (``sum``, ``count`` of rows, ``min``, ``max``, ``mean``; without a kind, the sum of
    ``column`` or, without one, the count), rounded half-up to ``scale`` decimals when given,
    then cast to ``data_type``. ``streamshift explain`` reads the kind to say how each member
    of a group makes its value.

    Sums and counts are *additive*: they move by signed deltas (a row's old contribution out,
    its new one in), so a view made only of them can also be kept incrementally
    (``streamshift serve``). Integer and decimal sums kept that way are exact, so they equal
    the Delta view's. A sum of a floating-point column is not: its running total rounds at
    every move, and Spark's own sum rounds in whatever order the rows come, so the two agree
    within rounding, not bit for bit; sum a decimal column for exact serving.
    """

    name: str
    data_type: DataType
    column: str | None = None
    scale: int | None = None
    kind: str = ""

    def __post_init__(self) -> None:
        kind = self.kind or (COUNT if self.column is None else SUM)
        if kind not in MEASURE_KINDS:
            raise ValueError(f"measure {self.name}: kind {kind!r} is not one of {MEASURE_KINDS}")
        if kind != COUNT and self.column is None:
            raise ValueError(f"measure {self.name}: a {kind} needs a column")
        object.__setattr__(self, "kind", kind)

    @property
    def additive(self) -> bool:
        return self.kind in ADDITIVE_KINDS

    def aggregate(self) -> Column:
        from pyspark.sql import functions as F

        if self.kind == COUNT:
            value = F.count(F.lit(1))
        else:
            assert self.column is not None  # only a count has none (__post_init__)
            value = {SUM: F.sum, MIN: F.min, MAX: F.max, MEAN: F.avg}[self.kind](self.column)
        if self.scale is not None:
            value = F.round(value, self.scale)
        return value.cast(self.data_type).alias(self.name)


@dataclass(frozen=True)
class View:
    """A named aggregate over the live current state, recomputed per group."""

    name: str
    group_key: tuple[str, ...]
    compute: Callable[[DataFrame], DataFrame]
    # Per-column reconciliation tolerance (absolute); columns not listed must match exactly.
    tolerances: Mapping[str, float] = field(default_factory=dict)
    # Set when the view is declared by its measures (``View.of_measures``).
    measures: tuple[Measure, ...] = ()

    @classmethod
    def of_measures(
        cls,
        name: str,
        group_key: tuple[str, ...],
        measures: tuple[Measure, ...],
        tolerances: Mapping[str, float] | None = None,
    ) -> View:
        """A view declared by its measures: batch, stream, ``explain`` (and, when every
        measure is additive, ``serve``) all derive from them."""

        def compute(current: DataFrame) -> DataFrame:
            return current.groupBy(*group_key).agg(*(m.aggregate() for m in measures))

        return cls(name, group_key, compute, dict(tolerances or {}), tuple(measures))

    @classmethod
    def additive(
        cls,
        name: str,
        group_key: tuple[str, ...],
        measures: tuple[Measure, ...],
        tolerances: Mapping[str, float] | None = None,
    ) -> View:
        """A view of sums and counts only (refuses another kind): ``serve`` can keep it."""
        other = [m.name for m in measures if not m.additive]
        if other:
            raise ValueError(f"view {name}: measures {other} are not sums or counts")
        return cls.of_measures(name, group_key, measures, tolerances)

    @property
    def is_additive(self) -> bool:
        """Declared by measures, every one a sum or a count (what ``serve`` keeps)."""
        return bool(self.measures) and all(m.additive for m in self.measures)


@dataclass(frozen=True)
class ReferenceTable:
    """A small reference dataset the flow ships (CSV, header row)."""

    name: str
    path: Path
    schema: str  # DDL, e.g. "book STRING, desk STRING"


@dataclass(frozen=True)
class Completeness:
    """How a flow's files (EOD, replacement, external) say they are whole.

    * ``marker``: a ``<file>.done`` beside the file, or a ``_SUCCESS`` in its folder;
    * ``trailer``: the file ends with a trailer line ``<trailer>,<rows>[,<sum>]`` (not a data
      row): the data rows' count and, with ``trailer_sum``, that column's sum;
    * neither: the file's size must stay the same for ``file_stable_seconds`` (a setting).
    """

    marker: bool = False
    trailer: str | None = None
    trailer_sum: str | None = None


@dataclass(frozen=True)
class CutOff:
    """When a business date closes with no EOD file (stage kappa): at ``time`` in ``zone`` on
    the date, plus ``grace_seconds`` for events still on their way. ``streamshift close``
    closes the date once that moment has passed and the stream has committed every offset
    the topic held at it."""

    time: dt.time = dt.time(18, 0)
    zone: str = "UTC"
    grace_seconds: int = 900

    def at(self, business_date: dt.date) -> dt.datetime:
        """The moment ``business_date`` closes (UTC): its cut-off plus the grace."""
        from zoneinfo import ZoneInfo

        local = dt.datetime.combine(business_date, self.time, ZoneInfo(self.zone))
        return (local + dt.timedelta(seconds=self.grace_seconds)).astimezone(dt.UTC)


@dataclass(frozen=True)
class Flow:
    name: str
    schema: StructType
    key: str
    version: str
    deleted: Callable[[], Column]
    event_time: str
    business_date: str
    rules: tuple[Rule, ...]
    prepare: Callable[[DataFrame, Reference], DataFrame]
    views: tuple[View, ...]
    reference: tuple[ReferenceTable, ...] = ()
    # Columns a retraction (the ``deleted`` condition) must carry; the rest may be empty.
    retraction_columns: tuple[str, ...] = ()
    # Value given to the flow's event-type column for synthetic retractions.
    retraction_values: Mapping[str, object] = field(default_factory=dict)
    # How its files signal that they are complete (a half-copied file is never loaded).
    completeness: Completeness = Completeness()
    # When a day closes without an EOD file (stage kappa).
    cut_off: CutOff = CutOff()
    # Columns optional in input, with the value a file or event that lacks one loads as
    # (Avro's backward compatibility): a column added to a running flow is declared here, so
    # files and events from before the change still load (docs/flows.md, "Changing a flow").
    optional: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = set(self.columns)
        unknown = [c for c in self.optional if c not in known]
        if unknown:
            raise ValueError(f"flow {self.name}: optional columns {unknown} are not in its schema")
        fixed = {self.key, self.version, self.business_date, self.event_time}
        required = sorted(fixed & set(self.optional))
        if required:
            raise ValueError(
                f"flow {self.name}: {required} cannot be optional (the key, version, "
                "event-time and business-date columns are always given)"
            )

    def default_text(self, column: str) -> str | None:
        """An optional column's default as input text (what a file's field would hold)."""
        value = self.optional[column]
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, dt.date):
            return value.isoformat()
        return str(value)

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.schema.fields]

    def view(self, name: str) -> View:
        for view in self.views:
            if view.name == name:
                return view
        known = ", ".join(v.name for v in self.views)
        raise KeyError(f"flow {self.name} has no view {name!r} (views: {known})")

    @property
    def group_columns(self) -> list[str]:
        """The columns that name a group of any of the flow's views, and the business date."""
        return sorted({self.business_date} | {c for v in self.views for c in v.group_key})

    @property
    def partition_column(self) -> str:
        return self.business_date

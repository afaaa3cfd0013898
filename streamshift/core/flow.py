"""The flow spec: everything a flow declares once and both batch and stream use.

A flow module in ``flows/`` builds one :class:`Flow`. Nothing here reads or writes data;
the write path (:mod:`streamshift.write.apply`) drives the flow's pure functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

Reference = Mapping[str, "DataFrame"]


@dataclass(frozen=True)
class Rule:
    """A named row-level rule. ``passes()`` is true for a good row (null counts as failing)."""

    name: str
    passes: Callable[[], Column]
    description: str = ""


@dataclass(frozen=True)
class View:
    """A named aggregate over the live current state, recomputed per group."""

    name: str
    group_key: tuple[str, ...]
    compute: Callable[[DataFrame], DataFrame]
    # Per-column reconciliation tolerance (absolute); columns not listed must match exactly.
    tolerances: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ReferenceTable:
    """A small reference dataset the flow ships (CSV, header row)."""

    name: str
    path: Path
    schema: str  # DDL, e.g. "book STRING, desk STRING"


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
    def partition_column(self) -> str:
        return self.business_date

"""The write path's shared predicates and joins: a row of a MERGE's target ``t`` and source
``s`` agree, lie in a batch's key range, are a replacement's synthetic cancel; a frame's rows
by (key, version). Column and SQL expressions only, no IO."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streamshift.engine.write.transforms import REPLACEMENT_SOURCE
from streamshift.spec import sqltext as sql
from streamshift.spec.contract import LOG_REF, SOURCE, SOURCE_REF
from streamshift.spec.flow import Flow
from streamshift.spec.sqltext import Sql

# The content hash of a version, beside it in the batch's and history's collected rows.
CONTENT = "_content"
# Where a delivery came from, beside it: its Kafka offset when the log carried it, else its
# file:line. One delivery, one value: history holds a version's first, redeliveries the rest.
DELIVERED = "_delivered"


def isin(column: str, values: Sequence[object]) -> Column:
    """``column`` is one of ``values``, as literals Spark binds (no SQL text from data)."""
    return F.col(column).isin(list(values)) if values else F.lit(False)


def synthetic(alias: str = "") -> Sql:
    """Whether a row (of ``alias``, in a MERGE) is a replacement's synthetic cancel."""
    return sql.coalesce(sql.col(SOURCE, alias).eq(sql.lit(REPLACEMENT_SOURCE)), sql.FALSE)


def same_columns(columns: Sequence[str], *, nulls_equal: bool = False) -> Sql:
    """Target ``t`` and source ``s`` agree on ``columns``: a MERGE's join on a key, or with
    ``nulls_equal`` (two nulls agree) a view's group key in its join and its measures, to
    update only what differs."""
    on = sql.TRUE
    for c in columns:
        target, source = sql.col(c, "t"), sql.col(c, "s")
        on = on & (target.eq_null_safe(source) if nulls_equal else target.eq(source))
    return on


def within(column: str, key_range: tuple[object, object], alias: str = "") -> Sql:
    """``column`` inside a batch's key range: implied by a join on the key, and what lets Delta
    skip every file whose key statistics lie outside it. Keys that grow with time (ids that
    carry their date, sequence numbers) put earlier days' files outside, so a load reads
    the history it can match, not all of it; other keys lose nothing."""
    low, high = key_range
    return sql.col(column, alias).between(low, high)


def same_delivery() -> Sql:
    """Target ``t`` and source ``s`` are one delivery (see ``DELIVERED``): a redelivery's
    identity beside its key and version."""
    return sql.coalesce(sql.col(LOG_REF, "t"), sql.col(SOURCE_REF, "t")).eq(
        sql.coalesce(sql.col(LOG_REF, "s"), sql.col(SOURCE_REF, "s"))
    )


def delivered() -> Column:
    """A stored or incoming version's delivery (see ``DELIVERED``)."""
    return F.coalesce(F.col(LOG_REF), F.col(SOURCE_REF))


def by_key_version(
    flow: Flow, frame: DataFrame, pairs: Iterable[tuple[object, object]], how: str
) -> DataFrame:
    """``frame``'s rows whose (key, version) is one of ``pairs`` (``how="left_semi"``) or is
    none of them (``"left_anti"``): a broadcast join with the pairs, whatever their number."""
    key, version = flow.key, flow.version
    wanted = frame.sparkSession.createDataFrame(
        sorted(pairs, key=repr), frame.select(key, version).schema
    )
    return frame.join(F.broadcast(wanted), [key, version], how)

"""The write path's pure transforms: DataFrame in, DataFrame out, no reads, writes or clocks.

``apply_changes`` (:mod:`streamshift.engine.write.apply`) wires them to the tables; tests call them
on inline data.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType
from pyspark.sql.window import Window

from streamshift.spec.contract import (
    APPLIED_AT,
    FAILED,
    IS_DELETED,
    LOG_REF,
    MALFORMED,
    RAW,
    REPLACEMENT_SOURCE,
    SOURCE,
    SOURCE_REF,
    VERSION_CONFLICT_RULE,
)
from streamshift.spec.flow import Flow, Reference

Transform = Callable[[DataFrame], DataFrame]

# The EOD file's differences applied to the stream layer (stage stream).
EOD_CORRECTION_SOURCE = "eod_correction"
# Changes the EOD process makes to its own date: never late, even for a closed date (in stage
# stream they reach the layer through the topic, after the file's date closed).
EOD_SOURCES = (REPLACEMENT_SOURCE, EOD_CORRECTION_SOURCE)


def raw_schema(flow: Flow) -> StructType:
    """The text form of a flow's rows: what files and Kafka payloads decode to."""
    return StructType(
        [StructField(c, StringType()) for c in flow.columns]
        + [StructField(SOURCE_REF, StringType()), StructField(RAW, StringType())]
    )


# ---- pure transforms ----------------------------------------------------------------------
def parse(flow: Flow) -> Transform:
    """Raw text → the flow's types; a value that does not parse is named in ``_failed_rules``."""

    def transform(raw: DataFrame) -> DataFrame:
        typed: list[Column] = []
        failures: list[Column] = []
        for f in flow.schema.fields:
            text = F.nullif(F.trim(F.col(f.name).cast("string")), F.lit(""))
            value = text if isinstance(f.dataType, StringType) else text.try_cast(f.dataType)
            typed.append(value.alias(f.name))
            failures.append(F.when(text.isNotNull() & value.isNull(), F.lit(f"parseable_{f.name}")))
        # A reader may flag a row as unreadable before parsing (e.g. wrong field count).
        if MALFORMED in raw.columns:
            failures.insert(0, F.col(MALFORMED))
        passthrough = [c for c in raw.columns if c.startswith("_")]
        return raw.select(
            *typed,
            *passthrough,
            F.filter(F.array(*failures), lambda r: r.isNotNull()).alias(FAILED),
        )

    return transform


def validate(flow: Flow) -> Transform:
    """Append the names of the flow's failing rules (after parse failures) to ``_failed_rules``."""

    def transform(prepared: DataFrame) -> DataFrame:
        checks = [
            F.when(~F.coalesce(rule.passes(), F.lit(False)), F.lit(rule.name))
            for rule in flow.rules
        ]
        failed = F.concat(F.col(FAILED), F.filter(F.array(*checks), lambda r: r.isNotNull()))
        if MALFORMED in prepared.columns:
            # A row the reader could not split or decode has no values to judge: its one
            # rule is the reader's.
            failed = F.when(F.col(MALFORMED).isNotNull(), F.col(FAILED)).otherwise(failed)
        return prepared.withColumn(FAILED, failed)

    return transform


def checked_changes(flow: Flow, raw: DataFrame, reference: Reference) -> DataFrame:
    """parse → prepare → validate, with the deletion flag; the shared front of the write path."""
    parsed = raw.transform(parse(flow))
    return (
        flow.prepare(parsed, reference)
        .transform(validate(flow))
        .withColumn(IS_DELETED, F.coalesce(flow.deleted(), F.lit(False)))
    )


def receipt_order() -> tuple[Column, Column, Column]:
    """The order deliveries were received in: by source (the file, or topic and partition),
    then its line or offset as a number (line 9 before line 10), then the reference itself."""
    number = F.regexp_extract(F.col(SOURCE_REF), r":([0-9]+)$", 1)
    return (
        F.regexp_replace(F.col(SOURCE_REF), r":[0-9]+$", ""),
        F.when(number != "", number.cast("long")),
        F.col(SOURCE_REF),
    )


def _newest_first(flow: Flow) -> tuple[Column, ...]:
    """A key's versions, highest first; one version delivered twice, first received first
    (deterministic). The one order of :func:`latest_per_key` and :func:`ranked_versions`."""
    return (F.col(flow.version).desc(), *receipt_order())


def content_hash(flow: Flow) -> Column:
    """A version's content: its parsed columns (where it came from excluded).

    The hash skips nulls, so a column added to the flow leaves every stored version's hash as
    it was; an optional column at its default hashes as null too, so a file from before the
    column was added, sent again, is the same version, not a conflict."""
    types = {f.name: f.dataType for f in flow.schema.fields}

    def part(column: str) -> Column:
        if flow.optional.get(column) is None:
            return F.col(column)
        default = F.lit(flow.default_text(column)).cast(types[column])
        return F.when(~F.col(column).eqNullSafe(default), F.col(column))

    return F.xxhash64(*[part(c) for c in flow.columns])


def latest_per_key(flow: Flow, df: DataFrame) -> DataFrame:
    """One row per key: the highest version (ties broken by source reference, deterministic)."""
    order = Window.partitionBy(flow.key).orderBy(*_newest_first(flow))
    return df.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


def distinct_versions(flow: Flow, df: DataFrame) -> DataFrame:
    """One row per (key, version): duplicates delivered twice in one batch count once."""
    order = Window.partitionBy(flow.key, flow.version).orderBy(*receipt_order())
    return df.withColumn("_rank", F.row_number().over(order)).where("_rank = 1").drop("_rank")


FIRST_VERSION = "_first_version"
LATEST_VERSION = "_latest_version"


def ranked_versions(flow: Flow, checked: DataFrame) -> DataFrame:
    """``checked`` with two flags on its accepted rows, from one sort by key (where
    :func:`distinct_versions` and :func:`latest_per_key` take a shuffle and a sort each):

    * ``_first_version``: the row ``distinct_versions`` keeps, the first delivery (lowest
      source reference) of its (key, version);
    * ``_latest_version``: the row ``latest_per_key`` keeps, the key's highest version.

    Rejected rows (a failed rule) get neither. A later delivery of a (key, version) whose
    content differs from the first one's is rejected under ``version_conflict``: the first
    stays, the conflict shows in quarantine instead of being dropped silently.
    """
    accepted = F.size(FAILED) == 0
    order = Window.partitionBy(accepted, F.col(flow.key)).orderBy(*_newest_first(flow))
    same_version = Window.partitionBy(accepted, F.col(flow.key), F.col(flow.version)).orderBy(
        *receipt_order()
    )
    first_of_key = F.row_number().over(order) == 1
    repeated = F.lag(flow.version).over(order).eqNullSafe(F.col(flow.version))
    content = content_hash(flow)
    conflict = accepted & (F.first(content).over(same_version) != content)
    return checked.withColumns(
        {
            FIRST_VERSION: accepted & (first_of_key | ~repeated),
            LATEST_VERSION: accepted & first_of_key,
            FAILED: F.when(conflict, F.array(F.lit(VERSION_CONFLICT_RULE))).otherwise(
                F.col(FAILED)
            ),
        }
    )


def recompute_view_groups(
    view_compute,
    live: DataFrame,
    groups: DataFrame,  # type: ignore[no-untyped-def]
    group_key: tuple[str, ...],
) -> DataFrame:
    """The touched groups with their recomputed values; ``_present`` is null for vanished ones."""
    in_groups = live.join(F.broadcast(groups), list(group_key), "left_semi")
    recomputed = view_compute(in_groups).withColumn("_present", F.lit(True))
    return groups.join(recomputed, list(group_key), "left")


def changed_groups(
    recomputed: DataFrame, stored: DataFrame, group_key: tuple[str, ...]
) -> DataFrame:
    """The recomputed groups that differ from the stored view: new, vanished or changed values.

    ``recomputed`` comes from :func:`recompute_view_groups` (``_present`` null = vanished);
    ``stored`` is the view table's rows for the same groups. Unchanged groups drop out, so a
    replayed change writes nothing to the view.
    """
    values = [c for c in recomputed.columns if c not in group_key and c != "_present"]
    old = stored.select(
        *group_key, *(F.col(c).alias(f"_stored_{c}") for c in values), F.lit(True).alias("_stored")
    )
    on = [recomputed[c].eqNullSafe(old[c]) for c in group_key]
    joined = recomputed.join(old, on, "left")
    present, was = F.col("_present").isNotNull(), F.col("_stored").isNotNull()
    differs = F.lit(False)
    for c in values:
        differs = differs | ~recomputed[c].eqNullSafe(F.col(f"_stored_{c}"))
    keep = (present & ~was) | (~present & was) | (present & was & differs)
    return joined.where(keep).select(*(recomputed[c] for c in recomputed.columns))


def state_columns(flow: Flow, checked: DataFrame) -> DataFrame:
    """The columns stored in current state and history.

    ``_applied_at`` is the one clock of the write path: a column Spark fills at execution,
    unless ``checked`` carries it already (the write path stamps its persisted batch once, so
    history and current state record the same instant).
    """
    keep = [c for c in checked.columns if not c.startswith("_") or c in (SOURCE, SOURCE_REF)]
    stamp = F.col(APPLIED_AT) if APPLIED_AT in checked.columns else F.current_timestamp()
    # Where Kafka delivered it (topic:partition:offset); null for a file's row.
    log = F.col(LOG_REF) if LOG_REF in checked.columns else F.lit(None).cast("string")
    return checked.select(*keep, log.alias(LOG_REF), stamp.alias(APPLIED_AT))


def replacement_cancels(
    flow: Flow, current: DataFrame, file_rows: DataFrame, business_date: dt.date, file: str
) -> DataFrame:
    """Synthetic retractions for live rows of ``business_date`` whose keys the file lacks.

    Each is the next version of its key, in raw form, so it takes the ordinary write path.
    """
    file_keys = file_rows.select(F.trim(F.col(flow.key)).alias(flow.key)).where(
        F.col(flow.key).isNotNull()
    )
    absent = current.where(
        (F.col(flow.business_date) == F.lit(business_date)) & ~F.col(IS_DELETED)
    ).join(file_keys, flow.key, "left_anti")
    values = {
        flow.key: F.col(flow.key).cast("string"),
        flow.version: (F.col(flow.version) + 1).cast("string"),
        flow.business_date: F.col(flow.business_date).cast("string"),
        **{c: F.lit(str(v)) for c, v in flow.retraction_values.items()},
    }
    columns = [values.get(c, F.lit(None).cast("string")).alias(c) for c in flow.columns]
    return absent.select(
        *columns,
        F.concat(F.lit(f"{REPLACEMENT_SOURCE}:{file}:"), F.col(flow.key)).alias(SOURCE_REF),
        F.lit(None).cast("string").alias(RAW),
        F.lit(REPLACEMENT_SOURCE).alias(SOURCE),
    )


def typed_payload(flow: Flow) -> Column:
    """A row's flow columns as JSON: the payload quarantine keeps for rows whose raw text the
    apply dropped (accepted rows carry none)."""
    return F.to_json(F.struct(*flow.columns))


def quarantine_rows(
    flow: Flow,
    rows: DataFrame,
    batch_id: str,
    payload: Column | None = None,
    rule: Column | None = None,
    rules: Column | None = None,
) -> DataFrame:
    """``rows`` as quarantine records (``QUARANTINE_SCHEMA``): the payload given, by default
    the typed row as JSON (:func:`typed_payload`: rows that kept no raw text), and by default
    the rules each row failed (``_failed_rules``: the first one, then all of them), stamped
    with the query's time (Spark's ``current_timestamp``)."""
    if payload is None:
        payload = typed_payload(flow)
    return rows.select(
        F.lit(flow.name).alias("flow"),
        F.col(SOURCE).alias("source"),
        F.col(SOURCE_REF).alias("source_ref"),
        payload.alias("raw_payload"),
        (F.try_element_at(F.col(FAILED), F.lit(1)) if rule is None else rule).alias("rule"),
        (F.array_join(F.col(FAILED), ",") if rules is None else rules).alias("rules"),
        F.col(flow.business_date).cast("date").alias("business_date"),
        F.lit(batch_id).alias("batch_id"),
        F.current_timestamp().alias("quarantined_at"),
    )

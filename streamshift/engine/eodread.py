"""Reading an EOD CSV file into the write path's raw form (Spark), after the file-level checks.

Files are read as RFC 4180 says (what Python's ``csv`` module and spreadsheets write): a field
in double quotes may hold commas, and a doubled quote inside it is one quote; a backslash is
data. Rows that cannot be split into the header's fields are kept whole and flagged with the
``field_count`` rule, so the write path quarantines them with their line number and raw text.
A record whose quoted field holds a line break spans physical lines; each of its lines is
flagged ``quoted_line_break`` (an odd number of quotes on the line), with its own line number.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from streamshift.spec.contract import MALFORMED, RAW, SOURCE_REF
from streamshift.spec.flow import Flow
from streamshift.store.eodfile import BadFileError, FileLayout

FIELD_COUNT_RULE = "field_count"
QUOTED_LINE_BREAK_RULE = "quoted_line_break"
# RFC 4180: a quote inside a quoted field is escaped by doubling it (Spark's CSV reader
# otherwise takes a backslash as the escape, and keeps doubled quotes as two).
CSV_OPTIONS = {"mode": "PERMISSIVE", "quote": '"', "escape": '"'}
_FIELD_SEPARATOR = ',(?=(?:[^"]*"[^"]*")*[^"]*$)'


def with_line_numbers(text: DataFrame) -> DataFrame:
    """Add ``line`` (1-based, file order) to a single-file ``spark.read.text`` DataFrame.

    Uses the split's start offset and the per-split row order, so the numbering costs one
    small aggregation rather than a trip through Python.
    """
    spark = text.sparkSession
    tagged = text.select(
        "value",
        F.col("_metadata.file_block_start").alias("_block"),
        F.monotonically_increasing_id().alias("_mid"),
    )
    blocks = tagged.groupBy("_block").agg(F.min("_mid").alias("_base"), F.count("*").alias("_n"))
    offsets, running = [], 0
    for row in sorted(blocks.collect(), key=lambda r: r["_block"]):
        offsets.append((row["_block"], row["_base"], running))
        running += row["_n"]
    table = spark.createDataFrame(offsets, "_block BIGINT, _base BIGINT, _before BIGINT")
    return tagged.join(F.broadcast(table), "_block").select(
        "value", (F.col("_before") + F.col("_mid") - F.col("_base") + 1).alias("line")
    )


def read_eod_file(spark: SparkSession, path: Path, flow: Flow, layout: FileLayout) -> DataFrame:
    """The file's data rows in raw form: flow columns as text, ``_source_ref`` = file:line."""
    ddl = ", ".join(f"`{c}` STRING" for c in layout.header)
    lines = with_line_numbers(spark.read.text(str(path)))
    # Fields are counted by commas outside double quotes; a row with another count is
    # quarantined whole rather than guessed at. Most lines have no quote at all: their commas
    # are counted directly (the quote-aware split scans the rest of the line at every comma).
    value = F.col("value")
    commas = F.length(value) - F.length(F.replace(value, F.lit(","), F.lit("")))
    quotes = F.length(value) - F.length(F.replace(value, F.lit('"'), F.lit("")))
    n_fields = F.when(F.instr(value, '"') == 0, commas + 1).otherwise(
        F.size(F.split(value, _FIELD_SEPARATOR, -1))
    )
    data = (F.col("line") > 1) & (F.length(F.trim("value")) > 0)
    if layout.trailer is not None:
        data = data & (F.col("line") != F.lit(layout.trailer.line))
    rows = lines.where(data).select(
        F.col("value").alias(RAW),
        F.concat(F.lit(f"{os.fspath(path)}:"), F.col("line").cast("string")).alias(SOURCE_REF),
        F.from_csv("value", ddl, CSV_OPTIONS).alias("r"),
        (n_fields != F.lit(len(layout.header))).alias("_wrong_count"),
        (F.when(F.instr(value, '"') > 0, quotes % 2 == 1).otherwise(False)).alias("_open"),
    )
    wrong_count, open_quote = F.col("_wrong_count"), F.col("_open")
    unreadable = wrong_count | open_quote

    def field(column: str) -> Column:
        if column in layout.absent:  # an optional column the file predates: its default
            return F.lit(flow.default_text(column)).cast("string")
        return F.col(f"r.`{column}`")

    return rows.select(
        *[F.when(unreadable, F.lit(None)).otherwise(field(c)).alias(c) for c in flow.columns],
        F.col(SOURCE_REF),
        F.col(RAW),
        F.when(open_quote, F.lit(QUOTED_LINE_BREAK_RULE))
        .when(wrong_count, F.lit(FIELD_COUNT_RULE))
        .alias(MALFORMED),
    )


def check_control_totals(rows: DataFrame, flow: Flow, layout: FileLayout, path: Path) -> None:
    """The trailer's row count (and sum) against the rows read; raises :class:`BadFileError`
    before anything is written when they differ (an incomplete or altered file)."""
    trailer = layout.trailer
    if trailer is None:
        return
    column = flow.completeness.trailer_sum
    totals = [F.count(F.lit(1)).alias("rows")]
    if column:
        value = F.trim(F.col(column)).try_cast(DecimalType(38, 10))
        totals.append(F.coalesce(F.sum(value), F.lit(0)).alias("total"))
    found = rows.agg(*totals).first()
    assert found is not None
    problems = []
    if found["rows"] != trailer.rows:
        problems.append(f"{trailer.rows} rows, the file holds {found['rows']}")
    if column and trailer.total is not None and Decimal(found["total"]) != trailer.total:
        problems.append(f"a {column} sum of {trailer.total}, the rows add up to {found['total']}")
    if problems:
        raise BadFileError(
            path,
            trailer.line,
            f"control totals differ: the trailer says {' and '.join(problems)}; the file is "
            "incomplete or altered, fetch it again",
        )

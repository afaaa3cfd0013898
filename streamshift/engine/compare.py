"""The pure diff of reconciliation: two DataFrames in, one DataFrame of breaks out.

A full outer join on the key, a per-column tolerance (exact unless the flow says otherwise),
and one break row per missing key or per differing column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, IntegralType, NumericType

from streamshift.spec.catalog import KINDS, MISSING_LEFT, MISSING_RIGHT, VALUE_MISMATCH

__all__ = ["KINDS", "MISSING_LEFT", "MISSING_RIGHT", "VALUE_MISMATCH", "compare"]

BREAK_COLUMNS = ["kind", "key", "column", "left_value", "right_value", "difference"]


def compare(
    left: DataFrame,
    right: DataFrame,
    key: Sequence[str],
    columns: Sequence[str],
    tolerances: Mapping[str, float] | None = None,
) -> DataFrame:
    """Breaks between ``left`` and ``right`` keyed by ``key`` over ``columns``.

    Numeric columns match when ``|right - left| <= tolerance`` (0 unless given); other
    columns must be equal (null equals null). Output columns: kind, key (JSON of the key),
    column (null for a missing key), left_value, right_value (JSON of the row for a
    missing key), difference (right - left for numbers).
    """
    tolerances = tolerances or {}
    numeric = {f.name for f in left.schema.fields if isinstance(f.dataType, NumericType)}
    # Decimals and integers compare in exact decimal arithmetic (100.01 - 100.00 is exactly
    # 0.01, within a 0.01 tolerance); only float columns compare as doubles.
    exact = {
        f.name for f in left.schema.fields if isinstance(f.dataType, DecimalType | IntegralType)
    }
    l_side = left.select(*key, F.struct(*columns).alias("_l"), F.lit(True).alias("_in_l"))
    r_side = right.select(*key, F.struct(*columns).alias("_r"), F.lit(True).alias("_in_r"))
    joined = l_side.join(r_side, list(key), "full_outer")
    key_json = F.to_json(F.struct(*[F.col(k).cast("string").alias(k) for k in key]))

    def differs(c: str) -> Column:
        lv, rv = F.col(f"_l.{c}"), F.col(f"_r.{c}")
        if c in exact:
            limit = F.lit(Decimal(repr(float(tolerances.get(c, 0)))))
            return ~F.coalesce(F.abs(rv - lv) <= limit, lv.isNull() & rv.isNull())
        if c in numeric:
            return ~F.coalesce(
                F.abs(rv.cast("double") - lv.cast("double")) <= F.lit(tolerances.get(c, 0.0)),
                lv.isNull() & rv.isNull(),
            )
        return ~lv.eqNullSafe(rv)

    def difference(c: str) -> Column:
        """right - left; for decimals and integers taken exactly, then stored as the nearest
        double (-453359.38 - -452065.18 is -1294.2, not the -1294.2000000000116 of two doubles)."""
        lv, rv = F.col(f"_l.{c}"), F.col(f"_r.{c}")
        as_doubles = rv.cast("double") - lv.cast("double")
        if c in exact:  # (as doubles only where the exact difference would overflow)
            return F.coalesce(F.try_subtract(rv, lv).cast("double"), as_doubles)
        if c in numeric:
            return as_doubles
        return F.lit(None).cast("double")

    cells = [
        F.when(
            differs(c),
            F.struct(
                F.lit(c).alias("column"),
                F.col(f"_l.{c}").cast("string").alias("left_value"),
                F.col(f"_r.{c}").cast("string").alias("right_value"),
                difference(c).alias("difference"),
            ),
        )
        for c in columns
    ]
    missing_left = joined.where(F.col("_in_l").isNull()).select(
        F.lit(MISSING_LEFT).alias("kind"),
        key_json.alias("key"),
        F.lit(None).cast("string").alias("column"),
        F.lit(None).cast("string").alias("left_value"),
        F.to_json("_r").alias("right_value"),
        F.lit(None).cast("double").alias("difference"),
    )
    missing_right = joined.where(F.col("_in_r").isNull()).select(
        F.lit(MISSING_RIGHT).alias("kind"),
        key_json.alias("key"),
        F.lit(None).cast("string").alias("column"),
        F.to_json("_l").alias("left_value"),
        F.lit(None).cast("string").alias("right_value"),
        F.lit(None).cast("double").alias("difference"),
    )
    mismatches = (
        joined.where(F.col("_in_l") & F.col("_in_r"))
        .select(
            key_json.alias("key"),
            F.explode(F.filter(F.array(*cells), lambda x: x.isNotNull())).alias("cell"),
        )
        .select(
            F.lit(VALUE_MISMATCH).alias("kind"),
            "key",
            "cell.column",
            "cell.left_value",
            "cell.right_value",
            "cell.difference",
        )
    )
    return missing_left.unionByName(missing_right).unionByName(mismatches)

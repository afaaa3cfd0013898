"""The reference flow: trades from a trading desk's end-of-day world.

Declared once; the EOD batch loader and the Kafka streaming job both run exactly these
rules, this enrichment and these views through ``streamshift.engine.write.apply.apply_changes``.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.sql.window import Window

from streamshift.spec.flow import Flow, Measure, Reference, ReferenceTable, Rule, View

REFERENCE_DIR = Path(__file__).parent / "reference"

PRICE = DecimalType(18, 6)
RATE = DecimalType(18, 8)
NOTIONAL = DecimalType(28, 6)
MONEY = DecimalType(28, 2)

SCHEMA = StructType(
    [
        StructField("trade_id", StringType()),
        StructField("version", IntegerType()),
        StructField("event_type", StringType()),
        StructField("business_date", DateType()),
        StructField("trade_ts", TimestampType()),
        StructField("book", StringType()),
        StructField("instrument", StringType()),
        StructField("side", StringType()),
        StructField("quantity", LongType()),
        StructField("price", PRICE),
        StructField("currency", StringType()),
    ]
)

EVENT_TYPES = ("NEW", "AMEND", "CANCEL")
SIDES = ("BUY", "SELL")


# ---- columns -----------------------------------------------------------------------------
def is_cancel() -> Column:
    return F.col("event_type") == F.lit("CANCEL")


def _unless_cancel(condition: Column) -> Column:
    """A CANCEL needs only trade_id, version and business_date."""
    return F.coalesce(is_cancel(), F.lit(False)) | condition


def signed(quantity: Column, side: Column) -> Column:
    return F.when(side == F.lit("SELL"), -quantity).otherwise(quantity)


# ---- rules -------------------------------------------------------------------------------
RULES = (
    Rule("trade_id_present", lambda: F.length(F.trim(F.col("trade_id"))) > 0),
    Rule("version_at_least_1", lambda: F.col("version") >= 1),
    Rule("business_date_present", lambda: F.col("business_date").isNotNull()),
    Rule("known_event_type", lambda: F.col("event_type").isin(*EVENT_TYPES)),
    Rule("trade_ts_present", lambda: _unless_cancel(F.col("trade_ts").isNotNull())),
    Rule("known_side", lambda: _unless_cancel(F.col("side").isin(*SIDES))),
    Rule("quantity_positive", lambda: _unless_cancel(F.col("quantity") > 0)),
    Rule("price_positive", lambda: _unless_cancel(F.col("price") > 0)),
    Rule("known_book", lambda: _unless_cancel(F.col("desk").isNotNull())),
    Rule("known_instrument", lambda: _unless_cancel(F.col("asset_class").isNotNull())),
    Rule("fx_rate_exists", lambda: _unless_cancel(F.col("rate_to_usd").isNotNull())),
)


# ---- enrichment ----------------------------------------------------------------------------
def fx_validity(fx_rates: DataFrame) -> DataFrame:
    """Turn daily FX rates into validity ranges: a rate holds until the next one appears."""
    by_currency = Window.partitionBy("currency").orderBy("business_date")
    return fx_rates.select(
        "currency",
        F.col("business_date").alias("valid_from"),
        F.lead("business_date").over(by_currency).alias("valid_to"),
        F.col("rate_to_usd").cast(RATE).alias("rate_to_usd"),
    )


def prepare(df: DataFrame, reference: Reference) -> DataFrame:
    """Join books, instruments and the as-of FX rate; add signed quantity and USD notionals."""
    books = F.broadcast(reference["books"].select("book", "desk", "legal_entity"))
    instruments = F.broadcast(reference["instruments"].select("instrument", "asset_class"))
    fx = F.broadcast(fx_validity(reference["fx_rates"]).alias("fx"))
    as_of = (
        (F.col("t.currency") == F.col("fx.currency"))
        & (F.col("t.business_date") >= F.col("fx.valid_from"))
        & (F.col("fx.valid_to").isNull() | (F.col("t.business_date") < F.col("fx.valid_to")))
    )
    enriched = (
        df.join(books, "book", "left")
        .join(instruments, "instrument", "left")
        .alias("t")
        .join(fx, as_of, "left")
        .select("t.*", F.col("fx.rate_to_usd"))
    )
    notional = F.col("quantity").cast(DecimalType(20, 0)) * F.col("price") * F.col("rate_to_usd")
    return enriched.withColumns(
        {
            "signed_quantity": signed(F.col("quantity"), F.col("side")),
            "notional_usd": notional.cast(NOTIONAL),
            "signed_notional_usd": signed(notional, F.col("side")).cast(NOTIONAL),
        }
    )


# ---- views ---------------------------------------------------------------------------------
POSITION_KEY = ("business_date", "book", "instrument")


POSITION_MEASURES = (
    Measure("net_quantity", LongType(), "signed_quantity"),
    Measure("net_notional_usd", MONEY, "signed_notional_usd", scale=2),
    Measure("gross_notional_usd", MONEY, "notional_usd", scale=2),
    Measure("trade_count", LongType()),
)
# Net and gross positions per (business_date, book, instrument) over live trades.
POSITIONS = View.additive(
    "positions",
    POSITION_KEY,
    POSITION_MEASURES,
    tolerances={"net_notional_usd": 0.01, "gross_notional_usd": 0.01},
)
positions = POSITIONS.compute


FLOW = Flow(
    name="trades",
    schema=SCHEMA,
    key="trade_id",
    version="version",
    deleted=is_cancel,
    event_time="trade_ts",
    business_date="business_date",
    rules=RULES,
    prepare=prepare,
    views=(POSITIONS,),
    reference=(
        ReferenceTable(
            "books", REFERENCE_DIR / "books.csv", "book STRING, desk STRING, legal_entity STRING"
        ),
        ReferenceTable(
            "instruments",
            REFERENCE_DIR / "instruments.csv",
            "instrument STRING, asset_class STRING, currency STRING",
        ),
        ReferenceTable(
            "fx_rates",
            REFERENCE_DIR / "fx_rates.csv",
            "business_date DATE, currency STRING, rate_to_usd DECIMAL(18,8)",
        ),
    ),
    retraction_columns=("trade_id", "version", "business_date", "event_type"),
    retraction_values={"event_type": "CANCEL"},
)

"""A second flow, from another domain: IoT sensor telemetry.

Devices send readings; each reading has a key (``reading_id``: the device and the second it
measured) and a per-device sequence number (``seq``) that grows with every message the device
sends. A device that re-sends a window after a fault sends the same readings again under higher
sequence numbers, so the re-sent values win however the messages interleave; a reading the
device voids (``status = VOID``) is retracted. The view is per device and hour: how many
readings, their minimum, maximum and mean.

Declared once, like every flow: the EOD loader and the streaming job run exactly these rules,
this enrichment and this view through ``streamshift.engine.write.apply.apply_changes``.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DateType,
    DecimalType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streamshift.spec.flow import (
    COUNT,
    MAX,
    MIN,
    Flow,
    Measure,
    Reference,
    ReferenceTable,
    Rule,
    View,
)
from streamshift.spec.flow import MEAN as MEAN_KIND

REFERENCE_DIR = Path(__file__).parent / "reference"
VALUE = DecimalType(12, 3)
MEAN = DecimalType(16, 6)

SCHEMA = StructType(
    [
        StructField("reading_id", StringType()),
        StructField("device_id", StringType()),
        StructField("seq", LongType()),
        StructField("status", StringType()),
        StructField("business_date", DateType()),
        StructField("reading_ts", TimestampType()),
        StructField("value", VALUE),
    ]
)

STATUSES = ("OK", "VOID")


def is_void() -> Column:
    return F.col("status") == F.lit("VOID")


def _unless_void(condition: Column) -> Column:
    """A VOID needs only reading_id, seq and business_date."""
    return F.coalesce(is_void(), F.lit(False)) | condition


RULES = (
    Rule("reading_id_present", lambda: F.length(F.trim(F.col("reading_id"))) > 0),
    Rule("seq_at_least_1", lambda: F.col("seq") >= 1),
    Rule("business_date_present", lambda: F.col("business_date").isNotNull()),
    Rule("known_status", lambda: F.col("status").isin(*STATUSES)),
    Rule("reading_ts_present", lambda: _unless_void(F.col("reading_ts").isNotNull())),
    Rule(
        "reading_on_its_business_date",
        lambda: _unless_void(F.to_date(F.col("reading_ts")) == F.col("business_date")),
    ),
    Rule("known_device", lambda: _unless_void(F.col("site").isNotNull())),
    Rule("value_present", lambda: _unless_void(F.col("value").isNotNull())),
    Rule(
        "value_within_sensor_range",
        lambda: _unless_void(F.col("value").between(F.col("range_low"), F.col("range_high"))),
    ),
)


def prepare(df: DataFrame, reference: Reference) -> DataFrame:
    """Join the device registry (site, sensor type, unit, physical range); add the hour."""
    devices = F.broadcast(reference["devices"])
    return df.join(devices, "device_id", "left").withColumn(
        "hour", F.date_trunc("hour", F.col("reading_ts"))
    )


HOURLY_KEY = ("business_date", "device_id", "hour")


# Per device and hour over live readings: count, minimum, maximum and mean.
HOURLY = View.of_measures(
    "hourly",
    HOURLY_KEY,
    (
        Measure("readings", LongType(), kind=COUNT),
        Measure("min_value", VALUE, "value", kind=MIN),
        Measure("max_value", VALUE, "value", kind=MAX),
        Measure("mean_value", MEAN, "value", kind=MEAN_KIND),
    ),
    tolerances={"mean_value": 0.001},
)


FLOW = Flow(
    name="telemetry",
    schema=SCHEMA,
    key="reading_id",
    version="seq",
    deleted=is_void,
    event_time="reading_ts",
    business_date="business_date",
    rules=RULES,
    prepare=prepare,
    views=(HOURLY,),
    reference=(
        ReferenceTable(
            "devices",
            REFERENCE_DIR / "devices.csv",
            "device_id STRING, site STRING, sensor_type STRING, unit STRING, "
            "range_low DECIMAL(12,3), range_high DECIMAL(12,3)",
        ),
    ),
    retraction_columns=("reading_id", "seq", "business_date", "status"),
    retraction_values={"status": "VOID"},
)

"""Decoding Kafka messages into the write path's raw form (Spark); the codec is in ``events``."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType

from streamshift.core.contract import MALFORMED, RAW, SOURCE, SOURCE_REF
from streamshift.core.flow import Flow
from streamshift.sources.events import (
    DECODE_ERROR,
    INTEGER_TYPES,
    JSON_INVALID,
    JSON_MISSING_FIELD,
    JSON_NOT_OBJECT,
    JSON_WRONG_TYPE,
    KAFKA_KEY,
    KAFKA_SOURCE,
    KAFKA_TS,
    KAFKA_VALUE,
    TEXT_TYPES,
)


def _accepted_json_types(data_type: DataType) -> tuple[str, ...]:
    """``schema_of_variant`` type names a column accepts (VOID = JSON null)."""
    if isinstance(data_type, TEXT_TYPES):
        return ("STRING", "VOID")
    if isinstance(data_type, INTEGER_TYPES):
        return ("BIGINT", "DECIMAL", "VOID")  # huge integers arrive as DECIMAL(n,0)
    if isinstance(data_type, DecimalType):
        return ("BIGINT", "DECIMAL", "DOUBLE", "VOID")
    return ("STRING", "BIGINT", "DECIMAL", "DOUBLE", "BOOLEAN", "VOID")


def _base_type(type_name: Column) -> Column:
    """'DECIMAL(5,2)' → 'DECIMAL', 'OBJECT<a: INT>' → 'OBJECT'."""
    return F.regexp_extract(type_name, r"^([A-Z_]+)", 1)


def decode(flow: Flow) -> callable:  # type: ignore[valid-type]
    """Kafka rows (key, value, topic, partition, offset) → the write path's raw changes."""

    def transform(kafka: DataFrame) -> DataFrame:
        # Staged projections: the JSON is parsed once per message and each field extracted
        # once (a single projection would re-evaluate the parse in every expression using it).
        value = F.col("value")
        text = F.when(F.is_valid_utf8(value), value.cast("string"))
        staged = (
            kafka.select(
                "key",
                "value",
                "topic",
                "partition",
                "offset",
                "timestamp",
                text.alias("_text"),
                F.try_parse_json(text).alias("_doc"),
            )
            .select(
                "*",
                _base_type(F.schema_of_variant("_doc")).alias("_top"),
                *[
                    F.try_variant_get("_doc", f"$.{c}", "variant").alias(f"_v_{c}")
                    for c in flow.columns
                ],
            )
            .select(
                "*",
                *[
                    _base_type(F.schema_of_variant(f"_v_{c}")).alias(f"_t_{c}")
                    for c in flow.columns
                ],
            )
        )
        missing = [F.when(F.col(f"_v_{c}").isNull(), F.lit(c)) for c in flow.columns]
        wrong = [
            F.when(
                ~F.col(f"_t_{f.name}").isin(*_accepted_json_types(f.dataType)),
                F.concat(F.lit(f"{f.name} is "), F.col(f"_t_{f.name}")),
            )
            for f in flow.schema.fields
        ]

        def joined(cols: list[Column]) -> Column:
            return F.array_join(F.filter(F.array(*cols), lambda x: x.isNotNull()), ", ")

        checked = staged.select(
            "*", joined(missing).alias("_missing"), joined(wrong).alias("_wrong")
        )
        doc, top = F.col("_doc"), F.col("_top")
        rule = (
            F.when(doc.isNull(), F.lit(JSON_INVALID))
            .when(top != F.lit("OBJECT"), F.lit(JSON_NOT_OBJECT))
            .when(F.length("_missing") > 0, F.lit(JSON_MISSING_FIELD))
            .when(F.length("_wrong") > 0, F.lit(JSON_WRONG_TYPE))
        )
        detail = (
            F.when(F.col("_text").isNull() & value.isNotNull(), F.lit("value is not valid UTF-8"))
            .when(value.isNull(), F.lit("empty message (null value)"))
            .when(doc.isNull(), F.lit("value is not valid JSON"))
            .when(top != F.lit("OBJECT"), F.concat(F.lit("value is a JSON "), top))
            .when(F.length("_missing") > 0, F.concat(F.lit("missing fields: "), F.col("_missing")))
            .otherwise(F.concat(F.lit("wrong JSON types: "), F.col("_wrong")))
        )
        with_rule = checked.select("*", rule.alias(MALFORMED))
        decodable = F.col(MALFORMED).isNull()
        return with_rule.select(
            *[
                F.when(decodable, F.try_variant_get(f"_v_{c}", "$", "string")).alias(c)
                for c in flow.columns
            ],
            F.concat_ws(
                ":", "topic", F.col("partition").cast("string"), F.col("offset").cast("string")
            ).alias(SOURCE_REF),
            F.coalesce(F.col("_text"), F.concat(F.lit("base64:"), F.base64(value))).alias(RAW),
            F.lit(KAFKA_SOURCE).alias(SOURCE),
            F.col(MALFORMED),
            F.when(~decodable, detail).alias(DECODE_ERROR),
            F.col("key").alias(KAFKA_KEY),
            value.alias(KAFKA_VALUE),
            F.col("timestamp").alias(KAFKA_TS),
        )

    return transform

"""Decoding Kafka messages into the write path's raw form (Spark); the codec is in ``events``."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from streamshift.spec.contract import (
    LOG_REF,
    MALFORMED,
    RAW,
    SOURCE,
    SOURCE_HEADER,
    SOURCE_REF,
    SOURCE_REF_HEADER,
    UNKNOWN_FIELDS,
)
from streamshift.spec.flow import Flow
from streamshift.store.events import (
    DECODE_ERROR,
    JSON_INVALID,
    JSON_MISSING_FIELD,
    JSON_NOT_OBJECT,
    JSON_UNKNOWN_FIELD,
    JSON_WRONG_TYPE,
    KAFKA_KEY,
    KAFKA_SOURCE,
    KAFKA_TS,
    KAFKA_VALUE,
)

TEXT_TYPES = (StringType, DateType, TimestampType, TimestampNTZType)
INTEGER_TYPES = (IntegerType, LongType, ShortType)


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


JVM_FUNCTION = "streamshift_decode_json"
JVM_CLASS = "dev.streamshift.DecodeJson"  # jvm/udf, built by `streamshift setup` or the wheel


def _spec(flow: Flow) -> str:
    """The flow's fields and the JSON types each accepts, as the JVM decoder reads them."""
    return ";".join(
        f"{'?' if f.name in flow.optional else ''}{f.name}="
        f"{'|'.join(_accepted_json_types(f.dataType))}"
        for f in flow.schema.fields
    )


def _jvm_fields(flow: Flow, staged: DataFrame) -> DataFrame:
    """``_top``, ``_missing``, ``_wrong`` and each field's text ``_s_<c>``, from one call per
    message of the JVM decoder (Spark's own JSON-to-variant parser, in a shipped jar)."""
    spark = staged.sparkSession
    if not spark.catalog.functionExists(JVM_FUNCTION):
        try:
            spark.udf.registerJavaFunction(JVM_FUNCTION, JVM_CLASS, ArrayType(StringType()))
        except Exception as e:
            raise RuntimeError(
                f"the JVM decoder {JVM_CLASS} is not on this Spark session's classpath "
                "(streamshift/jars/streamshift-udf.jar); run `streamshift setup` (in the "
                "kit's repository: scripts/setup, which builds it)"
            ) from e
    parts = F.call_function(JVM_FUNCTION, F.col("_text"), F.lit(_spec(flow)))
    with_parts = staged.select("*", parts.alias("_parts"))
    return with_parts.select(
        *staged.columns,
        F.col("_parts")[0].alias("_top"),
        F.col("_parts")[1].alias("_missing"),
        F.col("_parts")[2].alias("_wrong"),
        *[F.col("_parts")[3 + i].alias(f"_s_{c}") for i, c in enumerate(flow.columns)],
        F.col("_parts")[3 + len(flow.columns)].alias("_absent"),
        F.col("_parts")[4 + len(flow.columns)].alias("_unknown"),
    )


def _expression_fields(flow: Flow, staged: DataFrame) -> DataFrame:
    """The same columns as ``_jvm_fields`` from Spark's own expressions (``try_parse_json``, a
    ``try_variant_get`` and a ``schema_of_variant`` per field): the reference the JVM decoder
    is tested against (tests/test_decode_jvm.py) and the bench's baseline."""
    # Staged projections: the JSON is parsed once per message and each field extracted once
    # (a single projection would re-evaluate the parse in every expression using it).
    typed = (
        staged.select("*", F.try_parse_json("_text").alias("_doc"))
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
            *[_base_type(F.schema_of_variant(f"_v_{c}")).alias(f"_t_{c}") for c in flow.columns],
        )
    )
    required = [c for c in flow.columns if c not in flow.optional]
    missing = [F.when(F.col(f"_v_{c}").isNull(), F.lit(c)) for c in required]
    absent = [F.when(F.col(f"_v_{c}").isNull(), F.lit(c)) for c in flow.optional]
    keys = F.array_except(
        F.array_sort(F.json_object_keys("_text")),
        F.array(*[F.lit(c) for c in flow.columns]),
    )
    wrong = [
        F.when(
            ~F.col(f"_t_{f.name}").isin(*_accepted_json_types(f.dataType)),
            F.concat(F.lit(f"{f.name} is "), F.col(f"_t_{f.name}")),
        )
        for f in flow.schema.fields
    ]

    def joined(cols: list[Column], by: str = ", ") -> Column:
        if not cols:
            return F.lit("")
        return F.array_join(F.filter(F.array(*cols), lambda x: x.isNotNull()), by)

    return typed.select(
        *staged.columns,
        "_top",
        joined(missing).alias("_missing"),
        joined(wrong).alias("_wrong"),
        *[F.try_variant_get(f"_v_{c}", "$", "string").alias(f"_s_{c}") for c in flow.columns],
        joined(absent, ",").alias("_absent"),
        F.when(F.col("_top") == F.lit("OBJECT"), F.array_join(keys, ", ")).alias("_unknown"),
    )


def _header(name: str, present: bool) -> Column:
    """The first value of Kafka header ``name`` as text (null without it, or without headers:
    a source read without ``includeHeaders``)."""
    if not present:
        return F.lit(None).cast("string")
    found = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
    return F.when(F.size(found) > 0, found[0]["value"].cast("string"))


def decode(flow: Flow, *, reference: bool = False, refuse_unknown: bool = False) -> callable:  # type: ignore[valid-type]
    """Kafka rows (key, value, topic, partition, offset) → the write path's raw changes.

    The JSON checks run in the JVM decoder (``_jvm_fields``); ``reference=True`` runs them as
    Spark expressions instead (``_expression_fields``), which give the same rows, slower. An
    optional field a message lacks takes the flow's default; a field the flow does not declare
    is named in ``_unknown_fields`` and ignored, or with ``refuse_unknown`` the message is
    quarantined under ``json_unknown_field``."""

    def transform(kafka: DataFrame) -> DataFrame:
        value = F.col("value")
        text = F.when(F.is_valid_utf8(value), value.cast("string"))
        has_headers = "headers" in kafka.columns
        staged = kafka.select(
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            "timestamp",
            text.alias("_text"),
            _header(SOURCE_HEADER, has_headers).alias("_h_source"),
            _header(SOURCE_REF_HEADER, has_headers).alias("_h_source_ref"),
        )
        fields = (_expression_fields if reference else _jvm_fields)(flow, staged)
        top = F.col("_top")
        unknown = F.length("_unknown") > 0
        refused = F.lit(refuse_unknown) & unknown
        rule = (
            F.when(top.isNull(), F.lit(JSON_INVALID))
            .when(top != F.lit("OBJECT"), F.lit(JSON_NOT_OBJECT))
            .when(F.length("_missing") > 0, F.lit(JSON_MISSING_FIELD))
            .when(F.length("_wrong") > 0, F.lit(JSON_WRONG_TYPE))
            .when(refused, F.lit(JSON_UNKNOWN_FIELD))
        )
        detail = (
            F.when(F.col("_text").isNull() & value.isNotNull(), F.lit("value is not valid UTF-8"))
            .when(value.isNull(), F.lit("empty message (null value)"))
            .when(top.isNull(), F.lit("value is not valid JSON"))
            .when(top != F.lit("OBJECT"), F.concat(F.lit("value is a JSON "), top))
            .when(F.length("_missing") > 0, F.concat(F.lit("missing fields: "), F.col("_missing")))
            .when(F.length("_wrong") > 0, F.concat(F.lit("wrong JSON types: "), F.col("_wrong")))
            .otherwise(F.concat(F.lit("fields the flow does not declare: "), F.col("_unknown")))
        )
        with_rule = fields.select("*", rule.alias(MALFORMED))
        decodable = F.col(MALFORMED).isNull()
        offset = F.concat_ws(
            ":", "topic", F.col("partition").cast("string"), F.col("offset").cast("string")
        )

        def value_of(column: str) -> Column:
            text = F.col(f"_s_{column}")
            if column not in flow.optional or flow.default_text(column) is None:
                return text
            absent = F.array_contains(F.split(F.col("_absent"), ","), F.lit(column))
            return F.when(absent, F.lit(flow.default_text(column))).otherwise(text)

        return with_rule.select(
            *[F.when(decodable, value_of(c)).alias(c) for c in flow.columns],
            F.coalesce(F.col("_h_source_ref"), offset).alias(SOURCE_REF),
            offset.alias(LOG_REF),
            F.coalesce(F.col("_text"), F.concat(F.lit("base64:"), F.base64(value))).alias(RAW),
            F.coalesce(F.col("_h_source"), F.lit(KAFKA_SOURCE)).alias(SOURCE),
            F.col(MALFORMED),
            F.when(~decodable, detail).alias(DECODE_ERROR),
            F.col("key").alias(KAFKA_KEY),
            value.alias(KAFKA_VALUE),
            F.col("timestamp").alias(KAFKA_TS),
            F.when(unknown, F.col("_unknown")).alias(UNKNOWN_FIELDS),
        )

    return transform

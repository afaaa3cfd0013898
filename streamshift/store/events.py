"""Flow events on Kafka: one message per change, key = the flow key, value = JSON of the columns.

The JSON types follow the flow's schema: strings, dates and timestamps are JSON strings,
integers are JSON integers, decimals JSON numbers (exact: never through a float), a missing
value is ``null``. Every column must be present (``null`` allowed); unknown fields are
ignored, so producers may add fields without breaking consumers.

``decode`` (:mod:`streamshift.engine.decode`, Spark) turns a Kafka DataFrame into the write
path's raw form. A message that is not
valid JSON, not an object, lacks a column or carries a value of the wrong JSON type is
*undecodable*: it keeps its raw bytes and coordinates and is marked with one of the
``json_*`` rule names, so ``apply_changes`` quarantines it and the stream job forwards it to
the dead-letter topic. Decodable messages whose values break a rule (an unknown instrument, a
negative quantity) are ordinary rejected rows: quarantine only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from streamshift.spec.flow import Flow

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

KAFKA_SOURCE = "kafka"
DECODE_ERROR = "_decode_error"  # human detail of why a message is undecodable
KAFKA_KEY, KAFKA_VALUE, KAFKA_TS = "_kafka_key", "_kafka_value", "_kafka_ts"
# What ``decode`` keeps for the dead-letter topic; not part of the write path's raw changes.
TRANSPORT_COLUMNS = (KAFKA_KEY, KAFKA_VALUE, KAFKA_TS, DECODE_ERROR)

# Rule names of undecodable messages (first failing wins).
JSON_INVALID = "json_invalid"
JSON_NOT_OBJECT = "json_not_object"
JSON_MISSING_FIELD = "json_missing_field"
JSON_WRONG_TYPE = "json_wrong_type"
# A field the flow does not declare, with the setting unknown_fields = refuse.
JSON_UNKNOWN_FIELD = "json_unknown_field"
UNDECODABLE_RULES = (
    JSON_INVALID,
    JSON_NOT_OBJECT,
    JSON_MISSING_FIELD,
    JSON_WRONG_TYPE,
    JSON_UNKNOWN_FIELD,
)

_INTEGER = re.compile(r"[+-]?\d+")
# Schema types by name (``DataType.typeName()``), so producing imports no pyspark.
INTEGER_TYPE_NAMES = ("integer", "long", "short")


def topic_for(flow: Flow) -> str:
    return flow.name


def dlq_topic(topic: str) -> str:
    return f"{topic}.dlq"


def serving_topic(topic: str, view: str) -> str:
    """The compacted topic ``streamshift serve`` publishes a view of ``topic``'s events to."""
    return f"{topic}.{view}"


# ---- producing --------------------------------------------------------------------------
def _json_value(data_type: DataType, text: str | None) -> str:
    """One column's CSV text as JSON of the schema's type; text that does not fit stays a string."""
    if text is None or text.strip() == "":
        return "null"
    value = text.strip()
    if data_type.typeName() in INTEGER_TYPE_NAMES and _INTEGER.fullmatch(value):
        return str(int(value))
    if data_type.typeName() == "decimal":
        try:
            number = Decimal(value)
        except InvalidOperation:
            return json.dumps(value)
        if number.is_finite():
            return format(number, "f")
    return json.dumps(value)


def encode_event(flow: Flow, row: Mapping[str, str | None]) -> tuple[bytes, bytes]:
    """(key, value) of the Kafka message for one row given as text (an EOD file's row)."""
    fields = [
        f"{json.dumps(f.name)}:{_json_value(f.dataType, row.get(f.name))}"
        for f in flow.schema.fields
    ]
    key = (row.get(flow.key) or "").strip()
    return key.encode(), ("{" + ",".join(fields) + "}").encode()

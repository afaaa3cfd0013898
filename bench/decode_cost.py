"""Decode cost: what turning Kafka messages into the write path's raw rows costs, by stage.

N generated trade events (default 200,000) are encoded exactly as producers send them and held
in memory as a Kafka-shaped DataFrame (key, value, topic, partition, offset, timestamp). Then,
in one Spark session and alternating rounds, each variant is run to the end (a ``noop`` write
of all its columns) and timed; medians per variant and µs per event are printed.

* ``bytes``: cast the value to a string (the floor: no JSON at all);
* ``parse``: ``try_parse_json`` of every message;
* ``extract``: parse, then each column as a string (no type check);
* ``decode``: ``streamshift.engine.decode`` as the stream job runs it (type checks, rules),
  with the JSON checks in the JVM decoder (jvm/udf);
* ``decode-expr``: the same decode with the JSON checks as Spark expressions (its reference);
* ``from_json``: Spark's ``from_json`` with an all-string schema (what the issue quotes).

With ``--front``, also the rest of ``serve``'s first stage, cumulatively after ``decode``:
``+parse`` (trim, ``try_cast`` to the schema), ``+prepare`` (the flow's reference joins),
``+rules`` (``checked_changes``: every rule, the deletion flag) and ``+serve-input`` (the
accepted rows, projected to what the state processor reads); then the write path's: ``+ranked``
(``+rules`` with ``ranked_versions``, the one exchange by key) and ``+counted`` (the apply's
persisted frame, ``checked_batch``, built by its one counting pass, ``batch_counts``): together
the stream batch's "validate" step; ``+counted-compressed`` is ``+counted`` with the cache
compressed (Spark's default, which the kit's sessions turn off).

Run: .venv/bin/python bench/decode_cost.py [--events N] [--rounds 3] [--front]
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _scratch import scratch
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from flows.trades.generate import generate_day
from streamshift.engine.decode import decode
from streamshift.engine.spark import get_spark
from streamshift.spec.registry import get_flow
from streamshift.spec.settings import load_settings
from streamshift.store.events import encode_event
from streamshift.store.produce import read_rows

DAY = dt.date(2026, 11, 20)


def front_variants(spark, flow) -> dict[str, Callable[[DataFrame], DataFrame]]:  # type: ignore[no-untyped-def]
    """``serve``'s first stage after the decode, cumulatively (``run_serve`` wires the same)."""
    from streamshift.engine.write.apply import batch_counts, checked_batch, ranked_batch
    from streamshift.engine.write.target import load_reference
    from streamshift.engine.write.transforms import checked_changes, parse, ranked_versions
    from streamshift.spec.contract import FAILED, IS_DELETED, SOURCE_REF
    from streamshift.store.events import TRANSPORT_COLUMNS

    reference = load_reference(spark, flow)
    view = flow.views[0]
    inputs = [flow.key, flow.version, SOURCE_REF, IS_DELETED, *view.group_key]
    inputs += [m.column for m in view.measures if m.column is not None]

    def raw(df: DataFrame) -> DataFrame:
        return df.transform(decode(flow)).drop(*TRANSPORT_COLUMNS)

    def parsed(df: DataFrame) -> DataFrame:
        return raw(df).transform(parse(flow))

    def checked(df: DataFrame) -> DataFrame:
        return checked_changes(flow, raw(df), reference)

    def counted(df: DataFrame) -> DataFrame:
        batch = checked_batch(flow, raw(df), reference)
        ranked = ranked_batch(flow, batch)
        try:
            batch_counts(flow, ranked.frame)
        finally:
            ranked.unpersist()
            batch.unpersist()
        return df.limit(0)

    def counted_compressed(df: DataFrame) -> DataFrame:
        # Spark's default, which the kit turns off (streamshift.engine.spark.tuning_conf).
        name = "spark.sql.inMemoryColumnarStorage.compressed"
        kept = spark.conf.get(name)
        spark.conf.set(name, "true")
        try:
            return counted(df)
        finally:
            spark.conf.set(name, kept)

    return {
        "+parse": parsed,
        "+prepare": lambda df: flow.prepare(parsed(df), reference),
        "+rules": checked,
        "+serve-input": lambda df: checked(df).where(F.size(FAILED) == 0).select(*inputs),
        "+ranked": lambda df: ranked_versions(flow, checked(df)),
        "+counted": counted,
        "+counted-compressed": counted_compressed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--front", action="store_true", help="also serve's front, by stage")
    args = parser.parse_args()
    flow = get_flow("trades")
    work = scratch(None, "streamshift-bench-")
    print(f"[bench] generating and encoding {args.events} events", flush=True)
    files = generate_day(DAY, args.events, work / "files", seed=5)
    messages = [encode_event(flow, row) for row in read_rows(files.eod, flow)][: args.events]
    spark = get_spark(load_settings(home=work / "home"), app_name="bench-decode")
    now = dt.datetime.now(dt.UTC)
    kafka = (
        spark.createDataFrame(
            [(k, v, "trades", i % 3, i, now) for i, (k, v) in enumerate(messages)],
            "key BINARY, value BINARY, topic STRING, partition INT, offset LONG, timestamp TIMESTAMP",
        )
        .repartition(3)
        .persist()
    )
    print(f"[bench] {kafka.count()} messages in memory", flush=True)
    text = F.col("value").cast("string")
    strings = StructType([StructField(c, StringType()) for c in flow.columns])
    variants: dict[str, Callable[[DataFrame], DataFrame]] = {
        "bytes": lambda df: df.select(text.alias("t")),
        "parse": lambda df: df.select(F.try_parse_json(text).alias("d")),
        "extract": lambda df: df.select(F.try_parse_json(text).alias("d")).select(
            *[F.try_variant_get("d", f"$.{c}", "string").alias(c) for c in flow.columns]
        ),
        "decode": decode(flow),
        "decode-expr": decode(flow, reference=True),
        "from_json": lambda df: df.select(F.from_json(text, strings).alias("r")).select("r.*"),
    }
    if args.front:
        variants.update(front_variants(spark, flow))
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.rounds + 1):  # round 0 warms the JIT up and is not counted
        for name, transform in variants.items():
            started = time.perf_counter()
            kafka.transform(transform).write.format("noop").mode("overwrite").save()
            if round_:
                seconds[name].append(time.perf_counter() - started)
        print(f"[bench] round {round_} done", flush=True)
    floor = statistics.median(seconds["bytes"])
    print(f"\n{args.events} events, median of {args.rounds} rounds:")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(
            f"  {name:20s} {median:6.2f} s  {median / args.events * 1e6:6.1f} µs/event  "
            f"{median / floor:5.1f}× bytes"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

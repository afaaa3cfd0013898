"""The demo: a generated trading day through the one write path, on the embedded local stack."""

from __future__ import annotations

import datetime as dt
import sys

from pyspark.sql import functions as F

from streamshift.settings import Settings

DEMO_DATE = dt.date(2026, 11, 20)
DEMO_TRADES = 20_000


def _say(message: str) -> None:
    print(f"\n== {message}", flush=True)


def run_demo(settings: Settings, trades: int = DEMO_TRADES) -> int:
    from streamshift.batch import run_eod
    from streamshift.generate import generate_day
    from streamshift.registry import get_flow
    from streamshift.spark import get_spark
    from streamshift.tables import read
    from streamshift.writepath import Target

    out = settings.home / "demo" / str(DEMO_DATE)
    _say(f"generating {trades} trades for {DEMO_DATE} into {out}")
    files = generate_day(DEMO_DATE, trades, out, seed=42)

    print(f"starting Spark ({settings.spark_master}); warehouse {settings.warehouse}",
          file=sys.stderr, flush=True)
    spark = get_spark(settings, app_name="streamshift-demo")
    target = Target.open(spark, settings, get_flow("trades"), "batch")

    for title, path in (("the day's EOD file", files.eod),
                        ("the corrections (delta) file", files.corrections),
                        ("a file of poison rows", files.poison)):
        _say(f"loading {title}")
        print(run_eod(spark, target, DEMO_DATE, path).describe())

    _say(f"positions for {DEMO_DATE}, largest 15 by gross notional (batch layer)")
    positions = read(spark, target.tables.view("positions")).where(
        F.col("business_date") == F.lit(DEMO_DATE)
    )
    top = positions.orderBy(F.col("gross_notional_usd").desc()).limit(15)
    _print_rows(top)
    totals = positions.agg(F.count("*").alias("positions"), F.sum("trade_count").alias("trades"),
                           F.sum("gross_notional_usd").alias("gross_usd")).first()
    print(f"{totals.positions} positions over {totals.trades} live trades, "
          f"gross {totals.gross_usd:,.2f} USD")

    _say("quarantine summary (rows rejected, by rule)")
    summary = (read(spark, target.tables.quarantine).groupBy("rule").count().orderBy("rule"))
    _print_rows(summary)

    _say("try it yourself")
    print(f"  STREAMSHIFT_HOME={settings.home} .venv/bin/streamshift show --flow trades "
          f"--view positions --date {DEMO_DATE}")
    print(f"  STREAMSHIFT_HOME={settings.home} .venv/bin/streamshift eod --flow trades "
          f"--date {DEMO_DATE} --file {files.replacement} --replace")
    return 0


def _print_rows(df) -> None:  # type: ignore[no-untyped-def]
    from streamshift.show import format_table

    rows = [["" if v is None else str(v) for v in r] for r in df.collect()]
    print(format_table(df.columns, rows), end="")

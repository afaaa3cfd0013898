"""The daily HTML report of a flow, with a JSON summary beside it for machines.

``STREAMSHIFT_HOME/reports/<flow>/<date>/report.html`` and ``report.json``: the day's
reconciliation (counts by kind, the worst breaks), the parity streak over recent dates, stream
lag and batch duration over the day, quarantine counts by rule, late events by arrival hour,
and the stage history. Charts are inline SVG drawn by matplotlib.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streamshift.control.compare import KINDS
from streamshift.control.recon import latest_runs, parity_by_date, recon_breaks_path
from streamshift.control.stages import current_stage, stage_history
from streamshift.core.catalog import RECON_BREAKS_SCHEMA
from streamshift.core.flow import Flow
from streamshift.core.heartbeat import progress_path, read_progress
from streamshift.write.target import Target, read_or_empty

if TYPE_CHECKING:
    from streamshift.core.settings import Settings

STREAK_DAYS = 30


def report_dir(settings: Settings, flow: Flow, business_date: dt.date) -> Path:
    return settings.reports / flow.name / business_date.isoformat()


# ---- data ---------------------------------------------------------------------------------
def collect(
    spark: SparkSession, settings: Settings, flow: Flow, business_date: dt.date
) -> dict[str, Any]:
    """Everything the report shows, as plain data (this is also the JSON summary)."""
    latest = latest_runs(spark, settings, flow)
    today = [
        r.asDict()
        for r in latest.where(F.col("business_date") == F.lit(business_date))
        .orderBy("recon")
        .collect()
    ]
    run_ids = [r["run_id"] for r in today]
    breaks = read_or_empty(spark, recon_breaks_path(settings), RECON_BREAKS_SCHEMA).where(
        (F.col("flow") == flow.name)
        & (F.col("business_date") == F.lit(business_date))
        & F.col("run_id").isin(run_ids or [""])
    )
    worst = [
        r.asDict()
        for r in breaks.orderBy(F.abs(F.coalesce("difference", F.lit(float("inf")))).desc(), "key")
        .limit(15)
        .collect()
    ]
    streak = [
        r.asDict()
        for r in parity_by_date(latest)
        .select("business_date", "breaks", "clean")
        .orderBy(F.col("business_date").desc())
        .limit(STREAK_DAYS)
        .collect()
    ][::-1]

    quarantine: Counter[str] = Counter()
    late_by_hour: Counter[int] = Counter()
    for layer in ("batch", "stream"):
        target = Target.open(spark, settings, flow, layer)
        for r in (
            target.table("quarantine")
            .where((F.col("flow") == flow.name) & (F.col("business_date") == F.lit(business_date)))
            .groupBy("rule")
            .count()
            .collect()
        ):
            quarantine[f"{layer}: {r['rule']}"] += r["count"]
        for r in (
            target.table("late_events")
            .where((F.col("flow") == flow.name) & (F.col("business_date") == F.lit(business_date)))
            .groupBy(F.hour("arrived_at").alias("hour"))
            .count()
            .collect()
        ):
            late_by_hour[r["hour"]] += r["count"]

    day = business_date.isoformat()
    batches = [
        {
            "timestamp": p["timestamp"],
            "lag": p.get("lag"),
            "duration_s": p["duration_ms"] / 1000,
            "input_rows": p["input_rows"],
        }
        for p in read_progress(progress_path(settings.home, flow.name, "stream"))
    ]
    # The business date's own (UTC) day; for a date the stream did not run on (a replayed
    # or generated day), the last 24 hours, labelled as such.
    progress = [b for b in batches if b["timestamp"].startswith(day)]
    window = f"{day} (UTC)"
    if not progress and batches:
        last = dt.datetime.fromisoformat(batches[-1]["timestamp"])
        progress = [
            b
            for b in batches
            if last - dt.datetime.fromisoformat(b["timestamp"]) <= dt.timedelta(hours=24)
        ]
        window = f"the last 24 hours of stream batches (none ran on {day})"
    return {
        "flow": flow.name,
        "business_date": day,
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "stage": current_stage(spark, settings, flow),
        "reconciliations": today,
        "breaks_by_kind": {k: sum(int(r[k]) for r in today) for k in KINDS},
        "worst_breaks": worst,
        "parity_streak": streak,
        "stream_progress": progress,
        "stream_progress_window": window,
        "quarantine_by_rule": dict(sorted(quarantine.items())),
        "late_events_by_hour": {str(h): n for h, n in sorted(late_by_hour.items())},
        "stage_history": stage_history(spark, settings, flow),
    }


# ---- charts -------------------------------------------------------------------------------
def _svg(fig) -> str:  # type: ignore[no-untyped-def]
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _bar(
    labels: list[str],
    values: list[float],
    title: str,
    colors: list[str] | None = None,
    horizontal: bool = False,
) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, max(2.2, 0.3 * len(labels)) if horizontal else 2.8))
    if not labels:
        ax.text(0.5, 0.5, "nothing to show", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    elif horizontal:
        ax.barh(labels, values, color=colors or "#4c72b0")
        ax.invert_yaxis()
    else:
        ax.bar(labels, values, color=colors or "#4c72b0")
        ax.tick_params(axis="x", labelrotation=45)
    ax.set_title(title, fontsize=10)
    return _svg(fig)


def _lines(progress: list[dict[str, Any]], window: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (lag_ax, dur_ax) = plt.subplots(2, 1, figsize=(7, 4), sharex=True)
    if progress:
        times = [dt.datetime.fromisoformat(p["timestamp"]) for p in progress]
        lag_ax.plot(times, [p["lag"] or 0 for p in progress], color="#c44e52")
        dur_ax.plot(times, [p["duration_s"] for p in progress], color="#55a868")
    else:
        lag_ax.text(
            0.5, 0.5, "no stream batches on this date", ha="center", transform=lag_ax.transAxes
        )
    lag_ax.set_ylabel("lag (events)")
    dur_ax.set_ylabel("batch duration (s)")
    lag_ax.set_title(f"stream lag and micro-batch duration: {window}", fontsize=10)
    fig.autofmt_xdate()
    return _svg(fig)


# ---- rendering ----------------------------------------------------------------------------
def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "<p class='none'>none</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape('' if r.get(c) is None else str(r.get(c)))}</td>" for c in columns
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(data: dict[str, Any]) -> str:
    recs = data["reconciliations"]
    total = sum(data["breaks_by_kind"].values())
    verdict = (
        "no reconciliation for this date yet"
        if not recs
        else "clean"
        if total == 0
        else f"{total} breaks"
    )
    streak = data["parity_streak"]
    charts = {
        "breaks by kind": _bar(
            list(data["breaks_by_kind"]),
            list(data["breaks_by_kind"].values()),
            "today's breaks by kind",
            ["#dd8452", "#c44e52", "#8172b3"],
        ),
        # A clean date gets a short green bar, so a streak of clean days is visible.
        "parity streak": _bar(
            [str(s["business_date"]) for s in streak],
            [
                s["breaks"] if not s["clean"] else 0.05 * max([1] + [x["breaks"] for x in streak])
                for s in streak
            ],
            "parity per business date: breaks (red), clean (green)",
            ["#55a868" if s["clean"] else "#c44e52" for s in streak],
        ),
        "stream": _lines(data["stream_progress"], data["stream_progress_window"]),
        "quarantine": _bar(
            list(data["quarantine_by_rule"]),
            list(data["quarantine_by_rule"].values()),
            "quarantined rows by rule",
            horizontal=True,
        ),
        "late": _bar(
            [f"{h}:00" for h in data["late_events_by_hour"]],
            list(data["late_events_by_hour"].values()),
            "late events by arrival hour (UTC)",
        ),
    }
    figure = lambda name: f"<figure class='chart' data-chart='{name}'>{charts[name]}</figure>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>streamshift · {html.escape(data["flow"])} · {data["business_date"]}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.1em; margin-top: 2em; border-bottom: 1px solid #ddd; }}
table {{ border-collapse: collapse; font-size: 0.85em; }} td, th {{ padding: 2px 8px; border-bottom: 1px solid #eee; text-align: left; }}
.verdict {{ font-size: 1.2em; font-weight: bold; }} .none {{ color: #888; }}
figure.chart svg {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>{html.escape(data["flow"])} — business date {data["business_date"]}</h1>
<p>stage <b>{html.escape(data["stage"])}</b> · generated {data["generated_at"]}</p>
<h2>Reconciliation</h2>
<p class="verdict">{html.escape(verdict)}</p>
{_table(recs, ["recon", "left_side", "right_side", "left_rows", "right_rows", "missing_left", "missing_right", "value_mismatch", "run_id"])}
{figure("breaks by kind")}
<h3>Worst breaks</h3>
{_table(data["worst_breaks"], ["recon", "kind", "key", "column", "left_value", "right_value", "difference"])}
<h2>Parity streak</h2>
{figure("parity streak")}
<h2>Stream lag and latency</h2>
{figure("stream")}
<h2>Quarantine</h2>
{figure("quarantine")}
<h2>Late events</h2>
{figure("late")}
<h2>Stage history</h2>
{_table(data["stage_history"], ["changed_at", "from_stage", "to_stage", "changed_by", "forced", "reason"])}
</body></html>
"""


def write_report(
    spark: SparkSession, settings: Settings, flow: Flow, business_date: dt.date
) -> tuple[Path, Path]:
    data = collect(spark, settings, flow, business_date)
    out = report_dir(settings, flow, business_date)
    out.mkdir(parents=True, exist_ok=True)
    html_path, json_path = out / "report.html", out / "report.json"
    html_path.write_text(render(data), encoding="utf-8")
    json_path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    return html_path, json_path

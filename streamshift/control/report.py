"""The daily HTML report of a flow, with a JSON summary beside it for machines.

``STREAMSHIFT_HOME/reports/<flow>/<date>/report.html`` and ``report.json``: the day's
reconciliation (counts by kind, the worst breaks), every reconciliation run of the day in order
(the breaks before an EOD correction, the clean run after it), the adjustments the EOD process
made to the layer (corrections, a replacement's cancels, re-driven rows: each key with its
version and ``source_ref``, linking to its trace), the parity streak over recent dates, stream
lag and batch duration over the day, quarantine counts by rule, late events (by arrival hour,
and each with its key) and the stage history. Charts are inline SVG drawn by matplotlib; a chart
with nothing to show says so in words.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamshift.control.trace import trace_link
from streamshift.spec.catalog import KINDS, LAYERS, SHADOW_RECON, ControlTables
from streamshift.spec.contract import APPLIED_AT, LOG_REF, SOURCE, SOURCE_REF
from streamshift.spec.formatting import html_table
from streamshift.spec.registry import get_flow
from streamshift.store.heartbeat import progress_path, read_progress
from streamshift.store.quality import counts_by_verdict
from streamshift.store.records import (
    breaks_of,
    current_stage,
    latest_runs,
    parity_by_date,
    quality_results,
    stage_history,
)
from streamshift.store.tables import rows
from streamshift.store.versions import (
    EXAMPLE_COLUMNS,
    deployed_layers,
    live_root,
    live_tables,
    shadows,
    version_differences,
    version_examples,
)

if TYPE_CHECKING:
    from streamshift.spec.settings import Settings

STREAK_DAYS = 30


def report_dir(settings: Settings, flow: str, business_date: dt.date) -> Path:
    return settings.reports / flow / business_date.isoformat()


# ---- data ---------------------------------------------------------------------------------
def collect(settings: Settings, flow: str, business_date: dt.date) -> dict[str, Any]:
    """Everything the report shows, as plain data (this is also the JSON summary).

    Read without a JVM: the report is written by the CLI, a Python task of the EOD DAG, and
    linked from the Airflow Migration page.
    """
    latest = latest_runs(settings, flow)
    today = [r for r in latest if r["business_date"] == business_date]
    today.sort(key=lambda r: r["recon"])
    worst = breaks_of(settings, flow, business_date, [r["run_id"] for r in today], limit=15)
    streak = [
        {k: s[k] for k in ("business_date", "breaks", "clean")} for s in parity_by_date(latest)
    ][-STREAK_DAYS:]

    quarantine: Counter[str] = Counter()
    late_by_hour: Counter[int] = Counter()
    late: list[dict[str, Any]] = []
    on_day = [("flow", "=", flow), ("business_date", "=", business_date)]
    for layer in LAYERS:
        root = settings.warehouse / layer / live_root(settings.warehouse, flow, layer)
        for r in rows(root / "quarantine", ["rule"], on_day):
            quarantine[f"{layer}: {r['rule']}"] += 1
        for r in rows(root / "late_events", None, on_day):
            late_by_hour[r["arrived_at"].hour] += 1
            late.append({**r, "layer": layer, "trace": _trace_link(flow, r["key"], layer)})
    late.sort(key=lambda r: r["arrived_at"])
    runs_today = sorted(
        (
            r
            for r in rows(ControlTables(settings.warehouse).recon_runs, where=on_day)
            if not r["recon"].startswith(f"{SHADOW_RECON}:")
        ),
        key=lambda r: (r["run_at"], r["recon"]),
    )

    day = business_date.isoformat()
    batches = [
        {
            "timestamp": p["timestamp"],
            "lag": p.get("lag"),
            "duration_s": p["duration_ms"] / 1000,
            "input_rows": p["input_rows"],
        }
        for p in read_progress(progress_path(settings.home, flow, "stream"))
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
        "flow": flow,
        "business_date": day,
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "stage": current_stage(settings, flow),
        "reconciliations": today,
        "breaks_by_kind": {k: sum(int(r[k]) for r in today) for k in KINDS},
        "worst_breaks": worst,
        "reconciliation_runs": [
            {k: r[k] for k in ("run_at", "recon", "breaks", *KINDS, "stage", "run_id")}
            for r in runs_today
        ],
        "adjustments": adjustments(settings, flow, business_date),
        "late_events": late,
        "parity_streak": streak,
        "stream_progress": progress,
        "stream_progress_window": window,
        "quarantine_by_rule": dict(sorted(quarantine.items())),
        "late_events_by_hour": {str(h): n for h, n in sorted(late_by_hour.items())},
        "stage_history": stage_history(settings, flow),
        "quality": _quality(settings, flow, business_date),
        "versions": _versions(settings, flow),
    }


def _versions(settings: Settings, flow: str) -> dict[str, Any]:
    """The flow version each layer serves, and a version built beside them with its recorded
    differences (what the change would do, before it serves)."""
    live = deployed_layers(settings.warehouse, flow)
    layers = [
        {"layer": layer, "version": r["version"], "how": r["how"], "deployed_at": r["deployed_at"]}
        for layer, r in sorted(live.items())
    ]
    built = shadows(settings.warehouse, flow)
    if not built:
        return {"layers": layers, "shadow": None}
    version = max(r["version"] for r in built.values())
    return {
        "layers": layers,
        "shadow": {
            "version": version,
            "differences": version_differences(settings, flow, version),
            "examples": version_examples(settings, flow, version),
        },
    }


def _versions_html(versions: dict[str, Any]) -> str:
    parts = [html_table(versions["layers"], ["layer", "version", "how", "deployed_at"])]
    shadow = versions["shadow"]
    if shadow:
        parts.append(
            f"<p>Version {shadow['version']} is built beside the live one and not served; "
            "its differences from the live version, per table and date:</p>"
        )
        parts.append(
            html_table(shadow["differences"], ["table", "live", "dates", "differ", "breaks"])
        )
        parts.append("<h3>Its first differences</h3>")
        parts.append(html_table(shadow["examples"], EXAMPLE_COLUMNS))
    return "\n".join(parts)


# The sources of changes the EOD process makes to a layer, besides loading its file.
ADJUSTING_SOURCES = ("eod_correction", "replacement", "redrive")


def _trace_link(flow: str, key: object, layer: str) -> str:
    """The key's trace on the Migration page, relative to the report's own address there
    (``/streamshift/reports/<flow>/<date>``)."""

    return "../../" + trace_link(flow, key, layer)


def adjustments(settings: Settings, flow: str, business_date: dt.date) -> list[dict[str, Any]]:
    """Every version of the date the EOD process applied to a layer as an adjustment (an EOD
    correction, a replacement's cancel, a re-driven row), from history, oldest first."""

    spec = get_flow(flow)
    found = []
    for layer in LAYERS:
        history = live_tables(settings.warehouse, spec, layer).history
        where = [(spec.business_date, "=", business_date), (SOURCE, "in", ADJUSTING_SOURCES)]
        for r in rows(history, where=where):
            found.append(
                {
                    "layer": layer,
                    "applied_at": r[APPLIED_AT],
                    "key": r[spec.key],
                    "version": r[spec.version],
                    "source": r[SOURCE],
                    "source_ref": r[SOURCE_REF],
                    "log_ref": r.get(LOG_REF),
                    "trace": _trace_link(flow, r[spec.key], layer),
                }
            )
    return sorted(found, key=lambda a: (a["applied_at"], str(a["source_ref"])))


def _quality(settings: Settings, flow: str, business_date: dt.date) -> dict[str, Any]:
    """The date's latest data-quality results: counts, what did not pass, Data Docs pages."""
    checks = quality_results(settings, flow, business_date)
    docs = {f"{r['suite']} ({r['layer']})": r["docs_page"] for r in checks if r["docs_page"]}
    return {
        "counts": counts_by_verdict(checks),
        "not_passed": [
            {k: r[k] for k in ("suite", "layer", "expectation", "policy", "observed", "threshold")}
            for r in checks
            if not r["success"]
        ],
        "data_docs": dict(sorted(docs.items())),
    }


# ---- charts -------------------------------------------------------------------------------
def _svg(fig) -> str:  # type: ignore[no-untyped-def]
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _words(text: str) -> str:
    """A chart with nothing to draw: its message in words, one line high (no empty axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.45))
    ax.text(0.0, 0.5, text, ha="left", va="center", transform=ax.transAxes, color="#666")
    ax.set_axis_off()
    return _svg(fig)


def _bar(
    labels: list[str],
    values: list[float],
    title: str,
    colors: list[str] | None = None,
    horizontal: bool = False,
    empty: str = "nothing to show",
) -> str:
    """A bar chart; with nothing to draw (no bars, or all zero), ``empty`` in words instead of
    an empty axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not labels or not any(values):
        return _words(empty)
    fig, ax = plt.subplots(figsize=(7, max(2.2, 0.3 * len(labels)) if horizontal else 2.8))
    if horizontal:
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

    if not progress:
        return _words("no stream batches on this date")
    times = [dt.datetime.fromisoformat(p["timestamp"]) for p in progress]
    if not any(p["lag"] for p in progress):  # a flat zero line would say nothing
        fig, dur_ax = plt.subplots(1, 1, figsize=(7, 2.5))
        dur_ax.plot(times, [p["duration_s"] for p in progress], color="#55a868")  # type: ignore[arg-type]  # matplotlib plots datetimes
        dur_ax.set_ylabel("batch duration (s)")
        dur_ax.set_title(
            f"micro-batch duration: {window}; no lag: every batch caught up", fontsize=10
        )
        fig.autofmt_xdate()
        return _svg(fig)
    fig, (lag_ax, dur_ax) = plt.subplots(2, 1, figsize=(7, 4), sharex=True)
    lag_ax.plot(times, [p["lag"] or 0 for p in progress], color="#c44e52")
    dur_ax.plot(times, [p["duration_s"] for p in progress], color="#55a868")
    lag_ax.set_ylabel("lag (events)")
    dur_ax.set_ylabel("batch duration (s)")
    lag_ax.set_title(f"stream lag and micro-batch duration: {window}", fontsize=10)
    fig.autofmt_xdate()
    return _svg(fig)


# ---- rendering ----------------------------------------------------------------------------
def _quality_html(quality: dict[str, Any]) -> str:
    counts = quality["counts"]
    if not sum(counts.values()):
        return "<p class='none'>no data-quality run for this date yet</p>"
    # Data Docs live in reports/data_docs; this report is reports/<flow>/<date>/report.html.
    links = " · ".join(
        f"<a href='../../data_docs/{html.escape(page)}'>{html.escape(name)}</a>"
        for name, page in quality["data_docs"].items()
    )
    return (
        f"<p class='quality'><b class='q-pass'>{counts['pass']}</b> pass · "
        f"<b class='q-warn'>{counts['warn']}</b> warn · <b class='q-fail'>{counts['fail']}</b> "
        f"fail</p>"
        + (
            html_table(
                quality["not_passed"],
                ["suite", "layer", "expectation", "policy", "observed", "threshold"],
            )
            if quality["not_passed"]
            else "<p class='none'>every check passed</p>"
        )
        + f"<p>Data Docs: {links} · <a href='../../data_docs/index.html'>all runs</a></p>"
    )


def verdict(data: dict[str, Any]) -> str:
    """The day's reconciliation in a few words: the report's headline."""
    total = sum(data["breaks_by_kind"].values())
    if not data["reconciliations"]:
        return "no reconciliation for this date yet"
    return "clean" if total == 0 else f"{total} breaks"


def headline(data: dict[str, Any]) -> str:
    """One line for a terminal: the flow, date, stage, verdict and data-quality counts."""
    counts = data["quality"]["counts"]
    quality = (
        f"{counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail"
        if sum(counts.values())
        else "no data-quality run for this date yet"
    )
    return (
        f"{data['flow']} {data['business_date']} (stage {data['stage']}): {verdict(data)}; "
        f"data quality: {quality}"
    )


def render(data: dict[str, Any]) -> str:
    recs = data["reconciliations"]
    streak = data["parity_streak"]
    charts = {
        "breaks by kind": _bar(
            list(data["breaks_by_kind"]),
            list(data["breaks_by_kind"].values()),
            "today's breaks by kind",
            ["#dd8452", "#c44e52", "#8172b3"],
            empty="no breaks today" if recs else "no reconciliation for this date yet",
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
            empty="no stream-vs-batch reconciliation yet",
        ),
        "stream": _lines(data["stream_progress"], data["stream_progress_window"]),
        "quarantine": _bar(
            list(data["quarantine_by_rule"]),
            list(data["quarantine_by_rule"].values()),
            "quarantined rows by rule",
            horizontal=True,
            empty="no rows quarantined on this date",
        ),
        "late": _bar(
            [f"{h}:00" for h in data["late_events_by_hour"]],
            list(data["late_events_by_hour"].values()),
            "late events by arrival hour (UTC)",
            empty="no late events for this date",
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
<p class="verdict">{html.escape(verdict(data))}</p>
{"" if not recs else html_table(recs, ["recon", "left_side", "right_side", "left_rows", "right_rows", "missing_left", "missing_right", "value_mismatch", "run_id"])}
{figure("breaks by kind")}
<h3>Worst breaks</h3>
{html_table(data["worst_breaks"], ["recon", "kind", "key", "column", "left_value", "right_value", "difference"])}
<h3>Every reconciliation run of the day, in order</h3>
{html_table(data["reconciliation_runs"], ["run_at", "recon", "breaks", *KINDS, "stage", "run_id"], "runs")}
<h2>Adjustments</h2>
<p>What the EOD process changed in the layers for this date: EOD corrections, a replacement's
cancels, re-driven quarantine rows (each key links to its trace).</p>
{html_table(data["adjustments"], ["applied_at", "layer", "key", "version", "source", "source_ref", "log_ref"], "adjustments", links={"key": "trace"})}
<h2>Data quality</h2>
{_quality_html(data["quality"])}
<h2>Parity streak</h2>
{figure("parity streak")}
<h2>Stream lag and latency</h2>
{figure("stream")}
<h2>Quarantine</h2>
{figure("quarantine")}
<h2>Late events</h2>
{figure("late")}
{html_table(data["late_events"], ["arrived_at", "layer", "key", "version", "source"], "late", links={"key": "trace"}) if data["late_events"] else ""}
<h2>Stage history</h2>
{html_table(data["stage_history"], ["changed_at", "from_stage", "to_stage", "changed_by", "forced", "reason"])}
<h2>Flow versions</h2>
{_versions_html(data["versions"])}
</body></html>
"""


def write_report(
    settings: Settings, flow: str, business_date: dt.date, *, echo: bool = False
) -> tuple[Path, Path]:
    data = collect(settings, flow, business_date)
    if echo:
        print(headline(data))
    out = report_dir(settings, flow, business_date)
    out.mkdir(parents=True, exist_ok=True)
    html_path, json_path = out / "report.html", out / "report.json"
    html_path.write_text(render(data), encoding="utf-8")
    json_path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    return html_path, json_path

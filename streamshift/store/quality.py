"""The data-quality project: Great Expectations suites kept as files in the repo, and results.

``expectations/gx`` is a file-based Great Expectations 1.x project: one suite per flow and
dataset (``expectations/<flow>/<dataset>.json``, named ``<flow>.<dataset>``), one validation
definition and one checkpoint each. Each expectation carries its **policy** beside it, as its
Great Expectations ``severity``: ``critical`` = **fail** (the EOD task fails naming it),
``warning`` = **warn** (recorded, the run goes on), and a ``meta.name`` the summary shows.
Thresholds are the suites' kwargs, or (for thresholds computed per day) the suite's
``meta.streamshift`` entries; ``flows/<flow>/quality.json`` overrides either per flow.

Nothing here imports Spark or Great Expectations: the summary, the report, the promotion gate
and the Airflow page read results from the ``quality_runs`` Delta table through deltalake.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.spec.formatting import format_table
from streamshift.spec.project import find_project
from streamshift.spec.registry import flow_folder
from streamshift.spec.settings import Settings
from streamshift.store.tables import select
from streamshift.store.versions import live_tables

POLICIES = {"critical": "fail", "warning": "warn", "info": "warn"}


class QualityError(StreamshiftError):
    final = True


def gx_project() -> Path:
    """The project's Great Expectations project: ``<project>/expectations/gx``."""
    project = find_project()
    if project is None:
        raise QualityError(
            "no streamshift project here to read data-quality suites from; run from your "
            "project or set STREAMSHIFT_PROJECT"
        )
    return project.root / "expectations" / "gx"


def suite_path(suite: str) -> Path:
    flow, _, dataset = suite.partition(".")
    return gx_project() / "expectations" / flow / f"{dataset}.json"


def datasets(flow: str) -> list[str]:
    """The datasets the flow has suites for (``raw``, ``current``, a view, ``quarantine``)."""
    folder = gx_project() / "expectations" / flow
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def overrides(flow: str) -> dict[str, Any]:
    """``<flows>/<flow>/quality.json``: ``{suite: {"meta": {...}, "<expectation name>": {kwarg:
    value}}}`` — per-flow thresholds over the suites' own."""
    folder = flow_folder(flow)
    path = folder / "quality.json" if folder else None
    if path is None or not path.exists():
        return {}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def suite_document(suite: str) -> dict[str, Any]:
    """The suite's JSON with the flow's overrides applied (what is validated)."""
    path = suite_path(suite)
    if not path.exists():
        raise QualityError(f"no suite {suite}: expected {path}")
    doc: dict[str, Any] = json.loads(path.read_text())
    changes = overrides(suite.partition(".")[0]).get(suite, {})
    names = {e.get("meta", {}).get("name") for e in doc["expectations"]}
    unknown = sorted(set(changes) - names - {"meta"})
    if unknown:
        raise QualityError(
            f"flows/{suite.partition('.')[0]}/quality.json overrides {', '.join(unknown)} in "
            f"{suite}, which has no such expectation (names: {', '.join(sorted(n for n in names if n))})"
        )
    doc = copy.deepcopy(doc)
    doc.setdefault("meta", {}).setdefault("streamshift", {}).update(changes.get("meta", {}))
    for expectation in doc["expectations"]:
        expectation["kwargs"].update(changes.get(expectation.get("meta", {}).get("name"), {}))
    return doc


def suite_settings(suite: str) -> dict[str, Any]:
    """The suite's computed-threshold settings (``meta.streamshift``), overrides applied."""
    settings: dict[str, Any] = suite_document(suite).get("meta", {}).get("streamshift", {})
    return settings


# ---- results ------------------------------------------------------------------------------
@dataclass
class Check:
    """One expectation's outcome in one run."""

    suite: str
    expectation: str
    policy: str  # fail | warn
    success: bool
    observed: str
    threshold: str

    @property
    def verdict(self) -> str:
        if self.success:
            return "pass"
        return "FAIL" if self.policy == "fail" else "warn"


def new_run_id() -> str:
    """A quality run's id: its UTC start, then a short random part (ids sort by time)."""
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


@dataclass
class QualityRun:
    run_id: str
    flow: str
    business_date: str
    layer: str
    checks: list[Check] = field(default_factory=list)
    docs: dict[str, str] = field(default_factory=dict)  # suite -> page under data_docs/

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == "FAIL"]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == "warn"]

    def counts(self) -> dict[str, int]:
        return {v: sum(c.verdict == v for c in self.checks) for v in ("pass", "warn", "FAIL")}

    def table(self) -> str:
        rows = [
            [c.suite, c.expectation, c.policy, c.observed, c.threshold, c.verdict]
            for c in self.checks
        ]
        return format_table(
            ["suite", "expectation", "policy", "observed", "threshold", "result"], rows
        )

    def summary(self) -> str:
        n = self.counts()
        return (
            f"data quality of {self.flow} {self.business_date} ({self.layer} layer): "
            f"{n['pass']} pass, {n['warn']} warn, {n['FAIL']} fail"
        )

    def describe(self) -> str:
        """What the job says it did, as every job result does: the table of checks and the
        summary line with the run's id."""
        return f"{self.table()}{self.summary()} (run {self.run_id})"

    def failure_line(self) -> str:
        """One line naming each failing expectation, its observed value and threshold."""
        return "data quality failed: " + "; ".join(
            f"{c.suite} {c.expectation}: observed {c.observed}, expected {c.threshold}"
            for c in self.failures
        )


def counts_by_verdict(rows: list[dict[str, Any]]) -> dict[str, int]:
    """pass/warn/fail counts of ``quality_runs`` rows (as :func:`quality_results` keeps them)."""
    out = {"pass": 0, "warn": 0, "fail": 0}
    for r in rows:
        out["pass" if r["success"] else r["policy"]] += 1
    return out


def wanted_datasets(flow: Flow, only: list[str] | None) -> list[str]:
    """The datasets to validate: ``only`` (refused when one has no suite) or every suite's."""
    known = datasets(flow.name)
    unknown = sorted(set(only or []) - set(known))
    if unknown:
        raise QualityError(
            f"no suite for {', '.join(unknown)}; {flow.name} has suites for "
            f"{', '.join(known)} (expectations/gx/expectations/{flow.name}/)"
        )
    return only or known


def nothing_to_validate(flow: Flow, day: dt.date, layer: str) -> QualityError:
    catch_up = (
        f"load the day first (`streamshift eod --flow {flow.name} --date {day} --file F`)"
        if layer == "batch"
        else f"let `streamshift stream --flow {flow.name}` bring the date's events in first"
    )
    return QualityError(
        f"nothing to validate: the {layer} layer holds no rows of {flow.name} for {day} "
        f"(none in current state, none quarantined); {catch_up}, pick a date it holds, "
        "or give --file to validate the EOD file"
    )


def holds_nothing(settings: Settings, flow: Flow, day: dt.date, layer: str) -> bool:
    """Whether the layer holds no row of the date, current or quarantined, read without a JVM
    (so the CLI refuses at once instead of after starting Spark)."""
    tables = live_tables(settings.warehouse, flow, layer)
    for path, column, where in (
        (tables.current, flow.business_date, []),
        (tables.quarantine, "business_date", [("flow", "=", flow.name)]),
    ):
        found = select(path, [column], [*where, (column, "=", day)], limit=1)
        if found is not None and found.num_rows:
            return False
    return True

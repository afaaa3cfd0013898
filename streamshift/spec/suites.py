"""A flow's starter data-quality suites, and the Great Expectations files a suite needs.

A team's flow starts with no suites, and Great Expectations wants four files per dataset (the
suite, its validation definition, its checkpoint, the asset in ``great_expectations.yml``).
:func:`write_starter_suites` writes the suites a flow's spec implies — its key, version and
business date present, one current row per key, one view row per group, the reference data's
values known, the day's rows near the recent median, the quarantine's share small — for the
datasets that have none (``streamshift quality --flow F --write-suites``; ``streamshift init``
for its example flow). The team then tunes them: a suite is the one file it keeps.
:func:`complete_project` adds what a suite lacks to the run's copy of the project, so a missing
definition, checkpoint or asset is never the team's to write.

No Spark, no Great Expectations: files only.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml

from streamshift.spec.flow import COUNT, Flow

GX_VERSION = "1.24.1"  # the suites' format; the lock's great-expectations writes the same
IDS = uuid.UUID("6f1b9a52-5c8e-4d7e-9a3b-2f7d0c1e4b10")  # names the ids derived below
DATASOURCE = "spark"
BATCH = "day"  # the batch definition of a dataframe asset: one business date
RECENT = {"row_count_band": 0.3, "row_count_history": 10}
RAW = (
    "the day's EOD file as delivered (typed), before the write path; up to 1% of rows may fail "
    "a row-level rule (the write path quarantines them), more fails the day"
)


def _id(*parts: str) -> str:
    """A stable id for a derived object: the same suite completes the same way every run."""
    return str(uuid.uuid5(IDS, "/".join(parts)))


def _expect(kind: str, name: str, severity: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "type": kind,
        "kwargs": kwargs,
        "meta": {"name": name},
        "severity": severity,
    }


def _present(column: str, **kwargs: Any) -> dict[str, Any]:
    return _expect(
        "expect_column_values_to_not_be_null",
        f"{column}_present",
        "critical",
        column=column,
        **kwargs,
    )


def _near_median() -> dict[str, Any]:
    return _expect(
        "expect_table_row_count_to_be_between",
        "row_count_near_recent_median",
        "warning",
        min_value={"$PARAMETER": "rows_low"},
        max_value={"$PARAMETER": "rows_high"},
    )


def _known(flow: Flow, **kwargs: Any) -> list[dict[str, Any]]:
    """A reference table whose first column is a text column of the flow names its values."""
    text = {f.name for f in flow.schema.fields if f.dataType.typeName() == "string"}
    out = []
    for ref in flow.reference:
        first = ref.schema.split(",")[0].split()[0] if ref.schema else ""
        if first in text and first != flow.key:
            out.append(
                _expect(
                    "expect_column_values_to_be_in_set",
                    f"{first}_known",
                    "critical",
                    column=first,
                    value_set={"$PARAMETER": f"known_{ref.name}"},
                    **kwargs,
                )
            )
    return out


def starter_suites(flow: Flow) -> dict[str, tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    """Each dataset's starter suite: ``{dataset: (what it is, expectations, settings)}``."""
    mostly = {"mostly": 0.99}  # the write path quarantines a bad row; more than 1 % fails the day
    suites: dict[str, tuple[str, list[dict[str, Any]], dict[str, Any]]] = {
        "raw": (
            RAW,
            [
                _present(flow.key, **mostly),
                _present(flow.version, **mostly),
                _present(flow.business_date, **mostly),
                *_known(flow, **mostly),
                _near_median(),
            ],
            dict(RECENT),
        ),
        "current": (
            f"the business date's current state (one row per {flow.key}, its latest version)",
            [
                _expect(
                    "expect_column_values_to_be_unique",
                    f"one_row_per_{flow.key}",
                    "critical",
                    column=flow.key,
                ),
                _present(flow.key),
                _present(flow.version),
                _near_median(),
            ],
            dict(RECENT),
        ),
    }
    for view in flow.views:
        group = list(view.group_key)
        one_row = (
            _expect(
                "expect_compound_columns_to_be_unique",
                "one_row_per_group",
                "critical",
                column_list=group,
            )
            if len(group) > 1
            else _expect(
                "expect_column_values_to_be_unique",
                "one_row_per_group",
                "critical",
                column=group[0],
            )
        )
        counts = [
            _expect(
                "expect_column_sum_to_be_between",
                f"{m.name}_sums_to_live_rows",
                "critical",
                column=m.name,
                min_value={"$PARAMETER": "live_rows"},
                max_value={"$PARAMETER": "live_rows"},
            )
            for m in view.measures
            if m.kind == COUNT
        ]
        suites[view.name] = (
            f"the business date's {view.name} view (one row per {', '.join(group)})",
            [*(_present(c) for c in group), one_row, *counts],
            {},
        )
    suites["quarantine"] = (
        "the business date's quarantined rows (row-level rejections)",
        [
            _expect(
                "expect_table_row_count_to_be_between",
                "quarantine_share_below_threshold",
                "critical",
                min_value=0,
                max_value={"$PARAMETER": "quarantine_max_rows"},
            ),
            _expect(
                "expect_column_values_to_not_be_null",
                "every_rejection_names_its_rule",
                "critical",
                column="rule",
            ),
        ],
        {"quarantine_max_share": 0.05},
    )
    return suites


def write_starter_suites(flow: Flow, gx_root: Path) -> list[Path]:
    """Write the starter suite of each of the flow's datasets that has none; the files
    written (none when every dataset has its suite: a suite is never overwritten)."""
    folder = gx_root / "expectations" / flow.name
    written = []
    for dataset, (what, expectations, settings) in starter_suites(flow).items():
        path = folder / f"{dataset}.json"
        if path.exists():
            continue
        _write(
            path,
            {
                "expectations": expectations,
                "id": str(uuid.uuid4()),
                "meta": {
                    "great_expectations_version": GX_VERSION,
                    "streamshift": {"dataset": what, **settings},
                },
                "name": f"{flow.name}.{dataset}",
                "notes": None,
            },
        )
        written.append(path)
    return written


def complete_project(gx_root: Path) -> list[str]:
    """Give every suite of the project at ``gx_root`` the validation definition, checkpoint and
    dataframe asset it lacks (the run's copy, not the team's files); the suites completed."""
    config_path = gx_root / "great_expectations.yml"
    config = yaml.safe_load(config_path.read_text()) or {}
    sources = config.get("fluent_datasources") or {}
    source = sources.get(DATASOURCE) or {"type": "spark", "id": _id(DATASOURCE)}
    assets = source.get("assets") or {}
    added, completed = False, []
    for path in sorted((gx_root / "expectations").glob("*/*.json")):
        suite = f"{path.parent.name}.{path.stem}"
        if suite not in assets:
            assets[suite] = {
                "type": "dataframe",
                "id": _id(suite, "asset"),
                "batch_metadata": {},
                "batch_definitions": {BATCH: {"id": _id(suite, BATCH), "partitioner": None}},
            }
            added = True
        definition = gx_root / "validation_definitions" / f"{suite}.json"
        checkpoint = gx_root / "checkpoints" / f"{suite}.json"
        if definition.exists() and checkpoint.exists():
            continue
        if not definition.exists():
            asset = assets[suite]
            _write(
                definition,
                {
                    "data": {
                        "asset": {"id": asset["id"], "name": suite},
                        "batch_definition": {
                            "id": asset["batch_definitions"][BATCH]["id"],
                            "name": BATCH,
                        },
                        "datasource": {"id": source["id"], "name": DATASOURCE},
                    },
                    "id": _id(suite, "definition"),
                    "name": suite,
                    "suite": {"id": json.loads(path.read_text())["id"], "name": suite},
                },
            )
        if not checkpoint.exists():
            defined = json.loads(definition.read_text())
            _write(
                checkpoint,
                {
                    "actions": [],
                    "id": _id(suite, "checkpoint"),
                    "name": suite,
                    "result_format": "SUMMARY",
                    "validation_definitions": [{"id": defined["id"], "name": suite}],
                },
            )
        completed.append(suite)
    if added:  # the run's copy only: its comments are not kept
        config["fluent_datasources"] = {**sources, DATASOURCE: {**source, "assets": assets}}
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return completed


def _write(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")

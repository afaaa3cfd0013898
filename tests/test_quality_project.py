"""The data-quality project's files, read without Spark or Great Expectations: every suite is
complete (validation definition, checkpoint, asset), policies are declared, a flow's overrides
apply, and a wrong override names what exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from streamshift.quality import project
from streamshift.quality.project import PROJECT, QualityError, datasets, suite_document


def test_every_suite_has_its_definition_checkpoint_asset_and_policies() -> None:
    config = yaml.safe_load((PROJECT / "great_expectations.yml").read_text())
    assets = config["fluent_datasources"]["spark"]["assets"]
    assert config["analytics_enabled"] is False  # no calls home from an offline machine
    assert datasets("trades") == ["current", "positions", "quarantine", "raw"]
    for dataset in datasets("trades"):
        suite = f"trades.{dataset}"
        doc = suite_document(suite)
        definition = json.loads((PROJECT / "validation_definitions" / f"{suite}.json").read_text())
        checkpoint = json.loads((PROJECT / "checkpoints" / f"{suite}.json").read_text())
        assert definition["suite"] == {"id": doc["id"], "name": suite}
        assert definition["data"]["asset"]["name"] == suite and suite in assets
        assert checkpoint["validation_definitions"] == [{"id": definition["id"], "name": suite}]
        names = [e["meta"]["name"] for e in doc["expectations"]]
        assert len(names) == len(set(names)), suite  # names address overrides
        assert {e["severity"] for e in doc["expectations"]} <= {"critical", "warning"}


def test_a_flow_overrides_thresholds_and_a_wrong_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flows = tmp_path / "flows" / "trades"
    flows.mkdir(parents=True)
    (flows / "quality.json").write_text(
        json.dumps(
            {
                "trades.raw": {
                    "price_plausible": {"max_value": 5_000_000},
                    "meta": {"row_count_band": 0.1},
                }
            }
        )
    )
    monkeypatch.setattr(project, "REPO_ROOT", tmp_path)
    doc = suite_document("trades.raw")
    price = next(e for e in doc["expectations"] if e["meta"]["name"] == "price_plausible")
    assert price["kwargs"]["max_value"] == 5_000_000 and price["kwargs"]["min_value"] == 0
    assert doc["meta"]["streamshift"]["row_count_band"] == 0.1
    assert suite_document("trades.current")["meta"]["streamshift"]["row_count_band"] == 0.3

    (flows / "quality.json").write_text(json.dumps({"trades.raw": {"price_sane": {}}}))
    with pytest.raises(QualityError, match="has no such expectation.*price_plausible"):
        suite_document("trades.raw")

"""The data-quality project's files, read without Spark or Great Expectations: every suite is
complete (validation definition, checkpoint, asset), policies are declared, a flow's overrides
apply, a wrong override names what exists, and a flow's starter suites follow from its spec and
are completed like the kit's own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from streamshift.spec.registry import get_flow
from streamshift.spec.scaffold import TEMPLATE
from streamshift.spec.suites import complete_project, starter_suites, write_starter_suites
from streamshift.store.quality import QualityError, datasets, gx_project, suite_document

PROJECT = gx_project()


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


def _check_complete(gx: Path, suite: str) -> None:
    """The suite's validation definition, checkpoint and asset name each other by id."""
    doc = json.loads((gx / "expectations" / suite.replace(".", "/", 1)).with_suffix(".json")
                     .read_text())  # fmt: skip
    config = yaml.safe_load((gx / "great_expectations.yml").read_text())
    source = config["fluent_datasources"]["spark"]
    asset = source["assets"][suite]
    definition = json.loads((gx / "validation_definitions" / f"{suite}.json").read_text())
    checkpoint = json.loads((gx / "checkpoints" / f"{suite}.json").read_text())
    assert definition["suite"] == {"id": doc["id"], "name": suite}
    assert definition["data"]["asset"] == {"id": asset["id"], "name": suite}
    assert definition["data"]["datasource"] == {"id": source["id"], "name": "spark"}
    batch = definition["data"]["batch_definition"]
    assert asset["batch_definitions"][batch["name"]]["id"] == batch["id"]
    assert checkpoint["validation_definitions"] == [{"id": definition["id"], "name": suite}]


def test_starter_suites_follow_the_flows_spec_and_complete_at_run_time(tmp_path: Path) -> None:
    trades = get_flow("trades")
    suites = starter_suites(trades)
    assert list(suites) == ["raw", "current", "positions", "quarantine"]
    named = {d: {e["meta"]["name"]: e for e in s[1]} for d, s in suites.items()}
    assert named["current"]["one_row_per_trade_id"]["kwargs"] == {"column": "trade_id"}
    # The reference tables keyed by a text column of the flow (books, instruments; fx_rates
    # is keyed by a date): their values known in at least 99 % of the raw file's rows.
    assert {n for n in named["raw"] if n.endswith("_known")} == {"book_known", "instrument_known"}
    assert named["raw"]["book_known"]["kwargs"]["value_set"] == {"$PARAMETER": "known_books"}
    group = list(trades.view("positions").group_key)
    assert named["positions"]["one_row_per_group"]["kwargs"] == {"column_list": group}
    counts = [m.name for m in trades.view("positions").measures if m.kind == "count"]
    assert counts and all(f"{c}_sums_to_live_rows" in named["positions"] for c in counts)
    policies = {e["severity"] for s in suites.values() for e in s[1]}
    assert policies == {"critical", "warning"}

    # Written once, into a project with no suites: a suite is never overwritten.
    gx = tmp_path / "gx"
    gx.mkdir()
    shutil.copy(TEMPLATE / "expectations" / "gx" / "great_expectations.yml.tmpl",
                gx / "great_expectations.yml")  # fmt: skip
    written = write_starter_suites(trades, gx)
    assert sorted(p.stem for p in written) == sorted(suites)
    (gx / "expectations" / "trades" / "raw.json").write_text(
        (gx / "expectations" / "trades" / "raw.json").read_text().replace("0.99", "0.95")
    )
    assert write_starter_suites(trades, gx) == []
    assert '"mostly": 0.95' in (gx / "expectations" / "trades" / "raw.json").read_text()

    # The run's copy gets each suite's definition, checkpoint and asset; the kit's own project,
    # complete already, gets nothing.
    assert sorted(complete_project(gx)) == sorted(f"trades.{d}" for d in suites)
    for dataset in suites:
        _check_complete(gx, f"trades.{dataset}")
    assert complete_project(gx) == []
    kit = tmp_path / "kit"
    shutil.copytree(PROJECT, kit)
    before = (kit / "great_expectations.yml").read_text()
    assert complete_project(kit) == [] and (kit / "great_expectations.yml").read_text() == before


def test_a_flow_overrides_thresholds_and_a_wrong_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flows = tmp_path / "flows" / "trades"
    flows.mkdir(parents=True)
    (tmp_path / "flows" / "__init__.py").write_text("")
    (flows / "__init__.py").write_text("")
    shutil.copytree(PROJECT, tmp_path / "expectations" / "gx")
    (tmp_path / "streamshift.toml").write_text('flows = "flows"\n')
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
    monkeypatch.setenv("STREAMSHIFT_PROJECT", str(tmp_path))
    doc = suite_document("trades.raw")
    price = next(e for e in doc["expectations"] if e["meta"]["name"] == "price_plausible")
    assert price["kwargs"]["max_value"] == 5_000_000 and price["kwargs"]["min_value"] == 0
    assert doc["meta"]["streamshift"]["row_count_band"] == 0.1
    assert suite_document("trades.current")["meta"]["streamshift"]["row_count_band"] == 0.3

    (flows / "quality.json").write_text(json.dumps({"trades.raw": {"price_sane": {}}}))
    with pytest.raises(QualityError, match="has no such expectation.*price_plausible"):
        suite_document("trades.raw")


def test_data_docs_load_nothing_from_the_internet(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Every CDN file GE's page templates name has a local copy (a GE upgrade that names
    another one fails here), and pages point at the copies by working relative paths."""
    import re

    import great_expectations

    from streamshift.store import data_docs as docs_assets

    templates = Path(great_expectations.__file__).parent / "render" / "view"
    named = set()
    for template in templates.rglob("*.j2"):
        named |= set(
            re.findall(r"""(?:src|href)=["'](https://[^"'{]+)["']""", template.read_text())
        )
    resources = {u for u in named if not u.startswith("https://greatexpectations.io")}
    assert resources and resources <= set(docs_assets.FILES), resources - set(docs_assets.FILES)
    assert docs_assets.installed() == [], "run scripts/setup (npm ci in expectations/assets)"

    logo = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=1"
    head = "".join(f'<script src="{u}"></script>' for u in sorted(docs_assets.FILES))
    page = f'<html><head>{head}</head><body><img src="{logo}"/></body></html>'
    docs = tmp_path / "data_docs"
    deep = docs / "validations" / "trades" / "raw" / "run" / "t" / "b.html"
    for where in (docs / "index.html", deep):
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(page)
    (docs / "static" / "images").mkdir(parents=True)
    (docs / "static" / "images" / "logo-long.png").write_bytes(b"png")

    # Without the installed files nothing changes and the warning says what to run.
    assert docs_assets.localize(docs, assets=tmp_path / "nothing") == 0
    assert "scripts/setup" in capsys.readouterr().err
    assert deep.read_text() == page

    assert docs_assets.localize(docs) == 2
    assert docs_assets.remaining_addresses(docs) == {}
    for where in (docs / "index.html", deep):
        links = re.findall(r'src="([^"]+)"', where.read_text())
        assert len(links) == len(docs_assets.FILES) + 1
        assert all((where.parent / link).resolve().is_file() for link in links), links
    fonts = docs / "vendor" / "@fortawesome" / "fontawesome-free" / "webfonts"
    assert any(fonts.glob("*.woff2"))  # what all.min.css loads relative to itself
    assert docs_assets.localize(docs) == 0  # done once: a second pass changes nothing

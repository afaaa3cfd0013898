"""A team's project without a JVM: the project file found from where a command runs, its keys
and settings checked, settings' sources said, flows found in the project and by entry point
(a name twice refused), a command naming a flow it cannot find saying what to do,
`streamshift init` refusing a folder with files, and the jar lock matching what the
repository's set-up resolved."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamshift.spec.project import ProjectError, find_project
from streamshift.spec.registry import DuplicateFlowError, flow_names, flow_sources
from streamshift.spec.scaffold import InitError, init_project
from streamshift.spec.settings import SettingsError, resolve_settings
from tests.cli_support import cli_env, run_cli

FLOW = """
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, IntegerType, DateType
from streamshift.spec.flow import Flow
FLOW = Flow(name="{name}", schema=StructType([StructField("k", StringType()),
    StructField("v", IntegerType()), StructField("d", DateType())]), key="k", version="v",
    deleted=lambda: F.lit(False), event_time="d", business_date="d")
"""


def _project(root: Path, text: str = 'flows = "team_flows"\n', flows: tuple[str, ...] = ()) -> Path:
    (root / "team_flows").mkdir(parents=True)
    (root / "team_flows" / "__init__.py").write_text("")
    for name in flows:
        (root / "team_flows" / f"{name}.py").write_text(FLOW.format(name=name))
    (root / "streamshift.toml").write_text(text)
    return root


def test_the_project_is_found_walking_up_or_named(tmp_path: Path) -> None:
    root = _project(tmp_path / "team", flows=("payments",))
    deep = root / "team_flows" / "deeper"
    deep.mkdir()
    found = find_project({}, cwd=deep)
    assert found is not None and found.root == root and found.name == "team"
    assert find_project({}, cwd=tmp_path) is None
    assert find_project({"STREAMSHIFT_PROJECT": str(root)}, cwd=tmp_path).root == root  # type: ignore[union-attr]
    with pytest.raises(ProjectError, match="no streamshift.toml or pyproject.toml there"):
        find_project({"STREAMSHIFT_PROJECT": str(tmp_path)}, cwd=tmp_path)

    other = tmp_path / "py"
    other.mkdir()
    (other / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.streamshift]\nname = "p"\n'
    )
    assert find_project({}, cwd=other).name == "p"  # type: ignore[union-attr]


def test_unknown_keys_settings_and_secrets_in_the_file_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = {
        "a": ('flow = "x"\n', ProjectError, "unknown key flow"),
        "b": (
            '[settings]\nspark_mastr = "local[1]"\n',
            SettingsError,
            "unknown setting spark_mastr",
        ),
        "c": ('[settings]\nkafka_sasl_password = "pw"\n', ProjectError, "keep the secret"),
        "d": ('kit = ">=9"\n', ProjectError, "wants streamshift >=9"),
    }
    for name, (text, error, message) in cases.items():
        root = _project(tmp_path / name, text)
        monkeypatch.setenv("STREAMSHIFT_PROJECT", str(root))
        with pytest.raises(error, match=message):
            resolve_settings({k: v for k, v in __import__("os").environ.items()})


def test_settings_come_from_the_file_under_the_environment_and_say_where_from(
    tmp_path: Path,
) -> None:
    root = _project(
        tmp_path / "team",
        '[settings]\nhome = "data"\nkafka_topic_partitions = 6\npromotion_window = 3\n'
        'kafka_sasl_password_cmd = "echo s3cret"\n',
    )
    settings, sources = resolve_settings(
        {"STREAMSHIFT_PROJECT": str(root), "STREAMSHIFT_PROMOTION_WINDOW": "7"}
    )
    assert settings.home == root / "data"  # relative to the project, not the working folder
    assert (settings.kafka_topic_partitions, settings.promotion_window) == (6, 7)
    assert settings.kafka_sasl_password == "s3cret"
    assert sources["kafka_topic_partitions"] == str(root / "streamshift.toml")
    assert sources["promotion_window"] == "environment"
    assert "spark_master" not in sources  # its default

    plain = _project(tmp_path / "plain")
    assert resolve_settings({"STREAMSHIFT_PROJECT": str(plain)})[0].home == plain / "var"

    shown = run_cli(tmp_path, "settings", env={**_env(tmp_path), "STREAMSHIFT_PROJECT": str(root)})
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("STREAMSHIFT_KAFKA_TOPIC_"))
    assert "6" in line and f"from {root / 'streamshift.toml'}" in line
    assert "s3cret" not in shown.stdout


def _env(home: Path) -> dict[str, str]:
    from tests.cli_support import cli_env

    env = cli_env(home)
    env.pop("STREAMSHIFT_HOME")
    return env


def test_flows_come_from_the_project_and_entry_points_and_a_name_twice_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path / "team", flows=("payments", "refunds", "_helpers"))
    monkeypatch.setenv("STREAMSHIFT_PROJECT", str(root))
    assert flow_names() == ["payments", "refunds"]

    # An installed distribution adding a flow by the streamshift.flows entry point.
    site = tmp_path / "site"
    (site / "extra_flows").mkdir(parents=True)
    (site / "extra_flows" / "__init__.py").write_text(FLOW.format(name="payments"))
    info = site / "extra_flows-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-flows\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[streamshift.flows]\npayments = extra_flows\n")
    monkeypatch.syspath_prepend(str(site))
    from streamshift.spec import registry

    registry._installed_flows.cache_clear()
    try:
        with pytest.raises(DuplicateFlowError, match="payments.*declared twice.*extra_flows"):
            flow_sources()
        (info / "entry_points.txt").write_text("[streamshift.flows]\nchargebacks = extra_flows\n")
        registry._installed_flows.cache_clear()
        assert flow_names() == ["chargebacks", "payments", "refunds"]
    finally:
        registry._installed_flows.cache_clear()


def test_init_writes_a_project_once_and_it_is_found(tmp_path: Path) -> None:
    written = init_project(tmp_path / "new team")
    names = {p.relative_to(tmp_path / "new team").as_posix() for p in written}
    assert {"streamshift.toml", "flows/payments/__init__.py", "flows/payments/generate.py",
            "dags/new_team_dags.py", "tests/test_payments.py", "README.md",
            "expectations/gx/great_expectations.yml", ".gitignore"} <= names  # fmt: skip
    dag_file = (tmp_path / "new team" / "dags" / "new_team_dags.py").read_text().lower()
    assert "airflow" in dag_file and "dag" in dag_file and "build_dags(__file__)" in dag_file
    found = find_project({}, cwd=tmp_path / "new team" / "flows")
    assert found is not None and found.name == "new_team"
    with pytest.raises(InitError, match="not an empty folder"):
        init_project(tmp_path / "new team")
    suites = {n for n in names if n.startswith("expectations/gx/expectations/payments/")}
    assert {s.rsplit("/", 1)[1] for s in suites} == {
        "raw.json", "current.json", "by_merchant.json", "quarantine.json"}  # fmt: skip

    # Nothing written yet, so nothing recorded to plan against: said at once, no Spark started.
    env = cli_env(tmp_path / "home")
    env.pop("STREAMSHIFT_PROJECT", None)
    planned = run_cli(tmp_path / "home", "plan", "--flow", "payments", cwd=tmp_path / "new team",
                      env=env)  # fmt: skip
    assert planned.returncode == 0 and planned.stderr == "", planned.stderr[-2000:]
    assert planned.stdout.splitlines() == [
        f"payments, {layer} layer: no version recorded yet (its first write records the code "
        "on disk as version 1)"
        for layer in ("batch", "stream")
    ]


def test_the_jars_are_the_locked_ones_and_none_that_pyspark_ships() -> None:
    """`streamshift setup` (scripts/setup ran it) left each locked jar, by its hash, in the jars
    folder; the Spark folder holds no library PySpark ships itself (two versions of one on the
    class path); a changed file is fetched again."""
    import pyspark

    from streamshift.local.kit_setup import _digest, fetch_jars, locked_jars
    from streamshift.spec.settings import load_settings

    jars = load_settings().jars_dir
    locked = locked_jars()
    assert {(j.folder, j.name) for j in locked} >= {("spark", "delta-spark_4.2_2.13-4.4.0.jar")}
    for jar in locked:
        assert _digest(jars / jar.folder / "lib" / jar.name) == jar.sha256, jar.name
    shipped = {re.sub(r"-\d[\w.\-]*\.jar$", "", p.name)
               for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}  # fmt: skip
    doubled = [j.name for j in locked if j.folder == "spark" and
               re.sub(r"-\d[\w.\-]*\.jar$", "", j.name) in shipped]  # fmt: skip
    assert doubled == []
    said: list[str] = []
    assert fetch_jars(jars, said.append) == 0 and said == []  # all there: nothing fetched


def test_setup_says_and_prunes_the_cache_folders_of_other_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier kit's jar folder stays in the cache until `streamshift setup --prune`; the
    folder of this kit's lock and anything else in the cache are never removed."""
    from streamshift.local.kit_setup import other_locks, prune_other_locks
    from streamshift.spec.settings import jars_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    mine = jars_cache()
    older = [mine.parent / name for name in ("0123456789abcdef", "fedcba9876543210")]
    for folder in (mine, *older):
        (folder / "spark" / "lib").mkdir(parents=True)
        (folder / "spark" / "lib" / "a.jar").write_bytes(b"x" * 2_000_000)
    unrelated = mine.parent / "notes"
    unrelated.mkdir()
    assert other_locks(mine) == sorted(older)
    assert other_locks(tmp_path / "elsewhere") == []  # a jars_dir outside the cache

    said: list[str] = []
    assert prune_other_locks(mine, said.append, remove=False) == 2
    assert said == [
        (
            f"2 jar folders of other locks in {mine.parent} (4 MB): `streamshift setup --prune` "
            "removes them (a kit that uses one fetches it again with its own `streamshift setup`)"
        )
    ]
    assert all(folder.is_dir() for folder in older)
    assert prune_other_locks(mine, said.append, remove=True) == 2
    assert said[-1] == "removed 2 jar folders of other locks (4 MB)"
    assert not any(folder.exists() for folder in older)
    assert (mine / "spark" / "lib" / "a.jar").is_file() and unrelated.is_dir()
    assert prune_other_locks(mine, said.append, remove=True) == 0


def test_the_class_archive_lives_in_its_virtualenv_and_earlier_kits_archives_are_removed(
    tmp_path: Path,
) -> None:
    """Each virtualenv keeps its own class archive (a fresh clone's goes with the clone); the
    archives earlier kits left in the shared jars folder, one per virtualenv and 193 MB each,
    are removed by setup; the jars and the decoder beside them stay."""
    import sys

    from streamshift.engine.spark import archive_path
    from streamshift.local.kit_setup import remove_cached_archives

    assert archive_path().is_relative_to(sys.prefix)
    jars = tmp_path / "jars"
    (jars / "spark" / "lib").mkdir(parents=True)
    kept = [jars / "spark" / "lib" / "a.jar", jars / "streamshift-udf.jar"]
    for path in kept:
        path.write_bytes(b"jar")
    left = [jars / "spark" / f"classes-{h}.jsa" for h in ("514346878d05", "9a519b3e5ead")]
    for archive in left:
        archive.write_bytes(b"x" * 3_000_000)
        archive.with_suffix(".stamp").write_text("key")
    said: list[str] = []
    assert remove_cached_archives(jars, said.append) == 2
    assert said == [
        (
            f"removed 2 class archives of earlier kits from {jars / 'spark'} (6 MB); each "
            "virtualenv now keeps its own"
        )
    ]
    assert sorted(p.name for p in (jars / "spark").iterdir()) == ["lib"]
    assert all(path.read_bytes() == b"jar" for path in kept)
    assert remove_cached_archives(jars, said.append) == 0 and len(said) == 1
    assert remove_cached_archives(tmp_path / "no-jars-yet", said.append) == 0


def test_every_command_taking_a_flow_says_what_to_do_when_it_finds_none(tmp_path: Path) -> None:
    """Outside a project, each command naming a flow says how to get one; in a project, an
    unknown name gets the declared flows. One line each, exit code 2, no Spark started."""
    commands = [
        ["eod", "--flow", "payments", "--date", "2026-01-01", "--file", "x.csv"],
        ["stage", "--flow", "payments"],
        ["trace", "--flow", "payments", "--key", "T1"],
        ["plan", "--flow", "payments"],
        ["show", "--flow", "payments", "--view", "v"],
        ["report", "--flow", "payments", "--date", "2026-01-01"],
    ]
    outside = tmp_path / "outside"
    outside.mkdir()
    root = _project(tmp_path / "team", flows=("refunds", "chargebacks"))
    env = cli_env(tmp_path / "home")
    env.pop("STREAMSHIFT_PROJECT", None)  # the project is where the command runs
    for args in commands:
        for cwd, said in (
            (
                outside,
                "unknown flow 'payments': no streamshift project here .* `streamshift init DIR`",
            ),
            (root, "unknown flow 'payments'; declared flows: chargebacks, refunds"),
        ):
            done = run_cli(tmp_path / "home", *args, cwd=cwd, env=env)
            assert done.returncode == 2, (args, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and re.fullmatch(f"streamshift: error: {said}", lines[0]), (
                args,
                done.stderr,
            )

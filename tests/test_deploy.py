"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the Compose
specification's JSON schema (vendored by the check-jsonschema package, not fetched), pinned
images, mounted paths that exist, ports on 127.0.0.1 that don't clash, URLs that name the
services they point at, and one configuration shared by every Airflow component.

Each check is also run on a broken copy of the file, so a check that cannot fail is caught."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from streamshift.spec.scaffold import TEMPLATE, init_project, kit_version, render
from streamshift.spec.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"
AIRFLOW_COMPONENTS = {"api-server", "scheduler", "dag-processor", "triggerer"}


def compose_schema() -> dict[str, Any]:
    import check_jsonschema

    vendored = Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor"
    return json.loads((vendored / "compose-spec.json").read_text())


def _variable(value: str | None) -> str | None:
    """``${NAME}`` or ``${NAME:?message}`` as ``${NAME}``: which variable a value reads."""
    match = re.fullmatch(r"\$\{(\w+)(?::?[?-][^}]*)?\}", value or "")
    return f"${{{match.group(1)}}}" if match else value


def secrets_in(doc: dict[str, Any]) -> list[str]:
    """Settings whose name says secret and whose value is written in the file, not read from
    the environment (.env), and URLs carrying a literal password."""
    found = []
    for name, svc in doc["services"].items():
        for key, value in _env(svc).items():
            secret = re.search(r"PASSWORD|SECRET|TOKEN|PRIVATE_KEY", key) and not key.endswith(
                "_FILE"
            )
            if secret and not re.fullmatch(r"\$\{\w+(:?[?-][^}]*)?\}", str(value)):
                found.append(f"{name}: {key} is written in the file")
            password = urlsplit(str(value)).password if "://" in str(value) else None
            if password and not re.fullmatch(r"\$\{\w+\}", password):
                found.append(f"{name}: {key} carries a password")
    return found


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def _hostport(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def problems(doc: dict[str, Any], root: Path = REPO) -> list[str]:
    """Everything wrong with a parsed compose document of the project at ``root`` (the kit's
    repository: its example project); empty when it is right."""
    import jsonschema

    found = [
        f"schema: {'/'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}"
        for e in jsonschema.Draft7Validator(compose_schema()).iter_errors(doc)
    ]
    services: dict[str, dict[str, Any]] = doc.get("services", {})
    named_volumes = set(doc.get("volumes") or {})
    published: dict[str, str] = {}
    for name, svc in services.items():
        image = svc.get("image", "")
        tag = image.rsplit(":", 1)[1] if ":" in image.split("/")[-1] else ""
        if not tag or tag == "latest" or not re.search(r"\d", tag):
            found.append(f"{name}: image {image!r} is not pinned to a version")
        if "build" in svc:
            build = svc["build"]
            context = root / build.get("context", ".")
            if not (context / build.get("dockerfile", "Dockerfile")).is_file():
                found.append(f"{name}: build {build} has no Dockerfile in the repo")
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume["source"]
            if source.startswith((".", "/")):
                if not (root / source).exists():
                    found.append(f"{name}: mounted path {source} does not exist in the repo")
            elif source not in named_volumes:
                found.append(f"{name}: volume {source} is not declared")
        for port in svc.get("ports", []):
            parts = str(port).split(":")
            if len(parts) != 3 or parts[0] != "127.0.0.1":
                found.append(f"{name}: port {port} is not bound to 127.0.0.1")
                continue
            if parts[1] in published:
                found.append(f"{name}: host port {parts[1]} also used by {published[parts[1]]}")
            published[parts[1]] = name

    def points_at(owner: str, what: str, host: str, port: int, service: str, want: int) -> None:
        if host != service or port != want:
            found.append(f"{owner}: {what} {host}:{port} is not service {service}:{want}")

    kafka = services.get("kafka", {})
    kafka_env = _env(kafka)
    if not kafka.get("image", "").startswith("apache/kafka:"):
        found.append("kafka: not the official apache/kafka image")
    if "controller" not in kafka_env.get("KAFKA_PROCESS_ROLES", ""):
        found.append("kafka: not in KRaft mode (no controller role)")
    advertised = kafka_env.get("KAFKA_ADVERTISED_LISTENERS", "").split("//")[-1]
    masters = {
        n: s for n, s in services.items() if "org.apache.spark.deploy.master.Master" in _command(s)
    }
    master_port = {n: int(_command(s)[_command(s).index("--port") + 1]) for n, s in masters.items()}
    workers = [
        s for s in services.values() if "org.apache.spark.deploy.worker.Worker" in _command(s)
    ]
    if len(masters) != 1 or len(workers) < 2:
        found.append(f"spark: {len(masters)} master(s), {len(workers)} worker(s); want 1 and 2+")
    master_name, master_at = next(iter(master_port.items()), ("spark-master", 7077))
    for worker in workers:
        url = urlsplit(_command(worker)[-1])
        points_at(
            "spark worker", "master", url.hostname or "", url.port or 0, master_name, master_at
        )

    postgres = _env(services.get("postgres", {}))
    airflow = {n: s for n, s in services.items() if _command(s)[:1] == ["airflow"]}
    components = {_command(s)[1] for s in airflow.values()}
    if not AIRFLOW_COMPONENTS <= components:
        found.append(f"airflow: components {sorted(components)}, want {sorted(AIRFLOW_COMPONENTS)}")
    configs = {json.dumps([_env(s), s.get("image"), s.get("volumes")]) for s in airflow.values()}
    if len(configs) > 1:
        found.append("airflow: the components do not share one config (environment/image/volumes)")
    api = next((n for n, s in airflow.items() if _command(s)[1] == "api-server"), "")
    api_port = int(_command(airflow[api])[-1]) if api else 0

    for name, svc in services.items():
        env = _env(svc)
        for address in filter(None, env.get("STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS", "").split(",")):
            points_at(name, "bootstrap", *_hostport(address), "kafka", _hostport(advertised)[1])
        if "STREAMSHIFT_SPARK_MASTER" in env:
            url = urlsplit(env["STREAMSHIFT_SPARK_MASTER"])
            points_at(
                name, "Spark master", url.hostname or "", url.port or 0, master_name, master_at
            )
        for conn_json in re.findall(
            r"connections add spark_default --conn-json '(\{.*?\})'", " ".join(_command(svc))
        ):
            conn = json.loads(conn_json)
            host = urlsplit(conn["host"]).hostname or ""
            points_at(name, "spark_default", host, int(conn["port"]), master_name, master_at)
        if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in env:
            db = urlsplit(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
            points_at(name, "database", db.hostname or "", db.port or 5432, "postgres", 5432)
            wanted = (postgres.get("POSTGRES_USER"), _variable(postgres.get("POSTGRES_PASSWORD")))
            if (db.username, _variable(db.password)) != wanted or db.path.lstrip(
                "/"
            ) != postgres.get("POSTGRES_DB"):
                found.append(f"{name}: database user, password or name differ from postgres's")
            if env.get("AIRFLOW__CORE__EXECUTOR") != "LocalExecutor":
                found.append(f"{name}: executor is not the LocalExecutor")
        if "AIRFLOW__CORE__EXECUTION_API_SERVER_URL" in env:
            url = urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
            points_at(name, "execution API", url.hostname or "", url.port or 80, api, api_port)
        streamshift = {k: v for k, v in env.items() if k.startswith("STREAMSHIFT_")}
        if streamshift and streamshift.get("STREAMSHIFT_PROJECT") != "/app":
            found.append(
                f"{name}: STREAMSHIFT_PROJECT is not the image's copy of the project, /app"
            )
        if "STREAMSHIFT_PROJECT" in streamshift:  # /app in the image is the project at root
            streamshift["STREAMSHIFT_PROJECT"] = str(root)
        try:
            load_settings(streamshift)
        except Exception as exc:  # noqa: BLE001 - the message is the finding
            found.append(f"{name}: STREAMSHIFT_* settings refused: {exc}")
    return found


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def test_the_compose_file_is_valid_pinned_and_consistent(compose) -> None:  # type: ignore[no-untyped-def]
    assert problems(compose) == []
    services = compose["services"]
    assert services["init"]["restart"] == "no"
    init = " ".join(_command(services["init"]))
    assert "airflow db migrate" in init and "streamshift topics" in init
    conn = re.search(r"connections add spark_default --conn-json '(\{.*?\})'", init)
    assert conn and json.loads(conn.group(1))["host"] == "spark://spark-master"
    for svc in services.values():
        if _command(svc)[:1] == ["airflow"]:
            assert svc["depends_on"]["init"]["condition"] == "service_completed_successfully"
    assert {s["image"] for s in services.values() if "build" in s} == {"streamshift:0.1.0"}


SPARK_DEFAULT = (
    "airflow connections add spark_default --conn-json "
    """'{"conn_type": "spark", "host": "spark://spark-master", "port": 7077}'"""
)
BREAKAGES = [
    ("kafka", "image", "apache/kafka:latest", "is not pinned"),
    ("kafka", "image", "apache/kafka", "is not pinned"),
    ("spark-master", "ports", ["8081:8081"], "is not bound to 127.0.0.1"),
    ("airflow-apiserver", "ports", ["127.0.0.1:8081:8080"], "host port 8081 also used"),
    ("airflow-scheduler", "volumes", ["./no-such-dir:/x"], "does not exist in the repo"),
    ("airflow-triggerer", "command", ["airflow", "triggerer", "--x"], None),
    ("kafka", "healthcheck", {"interval": 10, "tries": 3}, "schema: services/kafka/healthcheck"),
    ("spark-worker-2", "command", ["spark-class", "x"], "1 master(s), 1 worker(s)"),
    ("init", "command", ["bash", "-c", SPARK_DEFAULT.replace("7077", "7000")], "spark_default"),
]


@pytest.mark.parametrize(("service", "key", "value", "expect"), BREAKAGES)
def test_each_check_catches_its_breakage(compose, service, key, value, expect) -> None:  # type: ignore[no-untyped-def]
    broken = copy.deepcopy(compose)
    broken["services"][service][key] = value
    found = problems(broken)
    if expect is None:  # an extra argument is not a problem: the check is about what matters
        assert found == []
    else:
        assert any(expect in p for p in found), found


@pytest.mark.parametrize(
    ("variable", "value", "expect"),
    [
        ("STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS", "broker:9092", "bootstrap broker:9092"),
        ("STREAMSHIFT_SPARK_MASTER", "spark://spark-master:7078", "Spark master"),
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://airflow:x@postgres/airflow", "pass"),
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://airflow:airflow@db/airflow", "db:"),
        ("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "http://airflow:8080/execution/", "execution"),
        ("STREAMSHIFT_NO_SUCH_SETTING", "1", "settings refused"),
    ],
)
def test_urls_must_name_their_services_and_airflow_shares_one_config(  # type: ignore[no-untyped-def]
    compose, variable, value, expect
) -> None:
    broken = copy.deepcopy(compose)
    env = dict(broken["services"]["airflow-scheduler"]["environment"])
    env[variable] = value
    broken["services"]["airflow-scheduler"]["environment"] = env
    found = problems(broken)
    assert any(expect in p for p in found), found
    assert any("do not share one config" in p for p in found), found


def _pinned_and_copied(root: Path) -> str:
    """The Dockerfile at ``root``, checked: every base image pinned to a version, every
    ``COPY`` source present under ``root``."""
    dockerfile = (root / "Dockerfile").read_text()
    bases = re.findall(r"^FROM\s+(\S+)", dockerfile, re.MULTILINE)
    assert bases and all(re.search(r":\d[\w.\-]*$", b) for b in bases), bases
    for source in re.findall(r"^COPY\s+(\S+)\s", dockerfile, re.MULTILINE):
        assert source == "." or (root / source).exists(), source
    return dockerfile


def test_the_image_is_built_from_the_lock_by_the_projects_setup() -> None:
    dockerfile = _pinned_and_copied(REPO)
    assert "COPY pyproject.toml requirements.lock" in dockerfile
    assert "scripts/setup" in dockerfile


def test_the_compose_file_holds_no_secret(compose) -> None:  # type: ignore[no-untyped-def]
    assert secrets_in(compose) == []
    # .env.example names each variable the file reads, with no value; .env stays out of git
    example = (REPO / ".env.example").read_text()
    wanted = set(re.findall(r"\$\{(\w+)", COMPOSE.read_text()))
    assert wanted and all(re.search(rf"^{v}=$", example, re.MULTILINE) for v in wanted)
    assert ".env" in (REPO / ".gitignore").read_text().split()
    # nor in the image: `COPY . .` would bake it into a layer
    assert ".env" in (REPO / ".dockerignore").read_text().split()
    # the check catches what it is for
    leaky = json.loads(json.dumps(compose))
    leaky["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] = "airflow"
    url = "postgresql://airflow:airflow@postgres/airflow"
    leaky["services"]["scheduler" if "scheduler" in leaky["services"] else "postgres"][
        "environment"
    ] = {**_env(leaky["services"]["postgres"]), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url}
    assert len(secrets_in(leaky)) >= 2


def test_the_kits_compose_file_is_the_one_init_writes_for_its_example_project() -> None:
    words = {"__NAME__": "streamshift", "__IMAGE_TAG__": kit_version()}
    assert COMPOSE.read_text() == render((TEMPLATE / "docker-compose.yml.tmpl").read_text(), words)
    assert (REPO / ".env.example").read_text() == (TEMPLATE / "env.example.tmpl").read_text()


def test_a_project_from_init_builds_its_own_image_with_the_kit_as_a_dependency(
    tmp_path: Path,
) -> None:
    """A team's image: the project's own Dockerfile and compose file, the kit and every package
    from the project's requirements.lock (the kit's lock and the kit's pin)."""
    project = tmp_path / "payments-team"
    init_project(project)
    doc = yaml.safe_load((project / "docker-compose.yml").read_text())
    assert problems(doc, project) == []
    assert {s["image"] for s in doc["services"].values() if "build" in s} == {"payments_team:0.1.0"}
    # The checks look at the project, not the kit: a mount of a folder the project lacks fails.
    broken = copy.deepcopy(doc)
    broken["services"]["airflow-scheduler"]["volumes"] = ["./jvm:/x"]
    assert any("./jvm does not exist" in p for p in problems(broken, project))

    dockerfile = _pinned_and_copied(project)
    assert "uv pip sync" in dockerfile and "requirements.lock" in dockerfile
    assert ".venv/bin/streamshift setup" in dockerfile  # the jars at build time, not run time
    assert "STREAMSHIFT_PROJECT=/app" in dockerfile
    uv = re.search(r"^UV_VERSION=(\S+)$", (REPO / "scripts" / "setup").read_text(), re.MULTILINE)
    assert uv and f"uv=={uv.group(1)}" in dockerfile  # the uv the kit's own set-up uses

    pinned = (project / "requirements.lock").read_text().splitlines()
    kit_lock = [
        line for line in (REPO / "requirements.lock").read_text().splitlines()
        if re.match(r"^[A-Za-z0-9]", line)
    ]  # fmt: skip
    assert kit_lock and set(kit_lock) <= set(pinned)
    assert f"streamshift=={kit_version()}" in pinned
    assert {".env", ".venv/"} <= set((project / ".gitignore").read_text().split())
    assert (project / ".env.example").read_text() == (REPO / ".env.example").read_text()
    # `COPY . .` after the image made its virtualenv: a local .venv would replace it, the
    # local stack's data would bloat it, and .env's secrets would stay in a layer.
    assert {".venv", "var", ".env"} <= set((project / ".dockerignore").read_text().split())

from __future__ import annotations

from pathlib import Path

import pytest

from streamshift.spec.settings import SettingsError, load_settings


def test_defaults_without_environment() -> None:
    settings = load_settings({})
    assert settings.home == Path("var").resolve()
    assert settings.spark_master == "local[*]"
    assert settings.kafka_bootstrap_servers == "127.0.0.1:9092"
    assert settings.warehouse == settings.home / "warehouse"
    assert settings.kafka_client_config() == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "PLAINTEXT",
    }


def test_values_are_parsed_from_prefixed_variables(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "STREAMSHIFT_HOME": str(tmp_path),
            "STREAMSHIFT_KAFKA_TOPIC_PARTITIONS": "6",
            "STREAMSHIFT_SPARK_UI": "yes",
            "STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS": "a:1, b:2",
        }
    )
    assert settings.home == tmp_path
    assert settings.kafka_topic_partitions == 6
    assert settings.spark_ui is True
    assert settings.kafka_bootstrap_servers == "a:1,b:2"


def test_unknown_setting_is_named() -> None:
    with pytest.raises(SettingsError, match="unknown setting STREAMSHIFT_KAFKA_PARTITONS"):
        load_settings({"STREAMSHIFT_KAFKA_PARTITONS": "3"})


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("STREAMSHIFT_KAFKA_TOPIC_PARTITIONS", "three", "whole number"),
        ("STREAMSHIFT_KAFKA_TOPIC_PARTITIONS", "0", "1 or more"),
        ("STREAMSHIFT_SPARK_UI", "maybe", "true/false"),
        ("STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS", "localhost", "not host:port"),
        ("STREAMSHIFT_KAFKA_SECURITY_PROTOCOL", "TLS", "one of PLAINTEXT"),
        ("STREAMSHIFT_STREAM_QUALITY_EVERY", "-1", "0 or more"),
        ("STREAMSHIFT_STREAM_NICE", "25", "niceness from 0 to 19"),
    ],
)
def test_malformed_value_names_variable_and_reason(name: str, value: str, reason: str) -> None:
    with pytest.raises(SettingsError) as error:
        load_settings({name: value})
    assert name in str(error.value)
    assert reason in str(error.value)


def test_sasl_settings_reach_both_clients() -> None:
    settings = load_settings(
        {
            "STREAMSHIFT_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "STREAMSHIFT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "STREAMSHIFT_KAFKA_SASL_USERNAME": "svc",
            "STREAMSHIFT_KAFKA_SASL_PASSWORD": "pw",
        }
    )
    assert settings.kafka_client_config()["sasl.username"] == "svc"
    jaas = settings.spark_kafka_options()["kafka.sasl.jaas.config"]
    assert "ScramLoginModule" in jaas and 'username="svc"' in jaas


def test_lower_priority_raises_niceness_and_never_lowers_it() -> None:
    """In a child process: the test's own priority stays as it is."""
    import subprocess
    import sys

    code = (
        "from streamshift.store.processes import lower_priority as p; print(p(7), p(3), p(0), p(9))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["7", "7", "7", "9"]


def test_drivers_get_their_options_unless_the_environment_picks_a_collector() -> None:
    from streamshift.engine.spark import driver_java_options, submit_conf

    settings = load_settings({})
    assert driver_java_options(settings, {}) == "-XX:+UseParallelGC"
    # The JVM refuses two collectors: one picked by the environment wins, other options stay.
    custom = load_settings({"STREAMSHIFT_SPARK_DRIVER_JAVA_OPTIONS": "-XX:+UseParallelGC -Xss4m"})
    serial = {"SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    assert driver_java_options(custom, serial) == "-Xss4m"
    assert driver_java_options(custom, {"JAVA_TOOL_OPTIONS": "-XX:+UseG1GC"}) == "-Xss4m"
    assert (
        driver_java_options(custom, {"SPARK_SUBMIT_OPTS": "-Xmx1g"}) == "-XX:+UseParallelGC -Xss4m"
    )

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("SPARK_SUBMIT_OPTS", raising=False)
        mp.delenv("JAVA_TOOL_OPTIONS", raising=False)
        driver = submit_conf(custom)["spark.driver.extraJavaOptions"]
        assert driver.endswith(" -XX:+UseParallelGC -Xss4m")
        assert "-Duser.timezone=UTC" in driver.split()
        assert "-Xss4m" not in submit_conf(custom)["spark.executor.extraJavaOptions"]
    # The name it had when it was for batch jobs alone is refused, not ignored.
    with pytest.raises(SettingsError, match="unknown setting STREAMSHIFT_SPARK_BATCH_JAVA_OPTIONS"):
        load_settings({"STREAMSHIFT_SPARK_BATCH_JAVA_OPTIONS": "-XX:+UseParallelGC"})


def test_spark_submit_args_survive_the_shell(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The drivers' JVM options hold spaces: the printed arguments, split the way ``eval``
    splits them, are exactly the deployment's, the driver's options included."""
    import shlex

    from streamshift.cli import main
    from streamshift.engine.spark import submit_args

    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    monkeypatch.delenv("JAVA_TOOL_OPTIONS", raising=False)
    assert main(["spark-submit-args"]) == 0
    printed = shlex.split(capsys.readouterr().out)
    assert printed == submit_args(load_settings())
    driver = next(a for a in printed if a.startswith("spark.driver.extraJavaOptions="))
    assert "-XX:+UseParallelGC" in driver.split()
    assert "-Duser.timezone=UTC" in driver.split()


def test_the_settings_command_masks_secrets(tmp_path: Path) -> None:
    from tests.cli_support import run_cli

    shown = run_cli(
        tmp_path, "settings", kafka_sasl_password="hunter2-secret", kafka_sasl_username="svc"
    )
    assert shown.returncode == 0, shown.stderr
    assert "hunter2" not in shown.stdout + shown.stderr
    password = next(line for line in shown.stdout.splitlines() if "KAFKA_SASL_PASSWORD" in line)
    assert "******** (set)" in password
    assert any(
        "KAFKA_SASL_USERNAME" in line and "svc" in line for line in shown.stdout.splitlines()
    )


def test_dataframe_debugging_is_off_unless_asked_for() -> None:
    """PySpark's call-site recording (``spark.python.sql.dataFrameDebugging.enabled``, a
    static conf) is set at session start from the setting: off by default."""
    from streamshift.engine.spark import tuning_conf

    key = "spark.python.sql.dataFrameDebugging.enabled"
    assert tuning_conf(load_settings({}))[key] == "false"
    asked = load_settings({"STREAMSHIFT_SPARK_DATAFRAME_DEBUGGING": "true"})
    assert tuning_conf(asked)[key] == "true"

"""One builder for every SparkSession streamshift starts: tests, CLI, batch and streaming jobs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from streamshift.errors import StreamshiftError
from streamshift.settings import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class MissingJarsError(StreamshiftError):
    """The connector/Delta jars have not been fetched (scripts/setup does it)."""


def spark_conf(settings: Settings, app_name: str = "streamshift") -> dict[str, str]:
    """The full Spark configuration for ``settings``; also what spark-submit receives."""
    jars = settings.spark_jars
    if not jars:
        raise MissingJarsError(
            f"no jars in {settings.jars_dir / 'spark' / 'lib'}: run scripts/setup to fetch "
            "Spark's Kafka connector and Delta Lake from Maven Central"
        )
    log4j = settings.jars_dir / "log4j2-spark.properties"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Duser.timezone=UTC"
    return {
        "spark.app.name": app_name,
        "spark.master": settings.spark_master,
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
        "spark.default.parallelism": str(settings.spark_shuffle_partitions),
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.sql.warehouse.dir": str(settings.warehouse / "_spark"),
        # Small local tables: skip the work Delta does for huge ones.
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.merge.repartitionBeforeWrite.enabled": "true",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    }


def get_spark(settings: Settings | None = None, app_name: str = "streamshift") -> SparkSession:
    """Get or create the SparkSession configured from ``settings``."""
    from pyspark.sql import SparkSession

    settings = settings or load_settings()
    # Bind everything to loopback; without it Spark picks the first non-loopback interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in spark_conf(settings, app_name).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def submit_args(settings: Settings) -> list[str]:
    """spark-submit arguments that load the same jars and configuration."""
    conf = spark_conf(settings)
    args = ["--master", conf.pop("spark.master"), "--jars", conf.pop("spark.jars")]
    conf.pop("spark.app.name")
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return args

"""Where the warm engine listens, asked without a JVM: its Spark Connect URL's host and port,
whether it answers, and what marks a process as one of its clients."""

from __future__ import annotations

import os
from collections.abc import Mapping

from streamshift.spec.settings import Settings
from streamshift.store.processes import port_open

# The hosts the local stack binds to: a stack command refuses to start or stop anything else.
LOOPBACK = {"127.0.0.1", "localhost"}


def engine_address(url: str) -> tuple[str, int]:
    """(host, port) of a Spark Connect URL (``sc://host:port/;params``; port 15002 if none)."""
    netloc = url.removeprefix("sc://").split("/", 1)[0].split(";", 1)[0]
    host, sep, port = netloc.rpartition(":")
    return (host, int(port)) if sep else (netloc, 15002)


def engine_answers(settings: Settings) -> bool:
    """Whether the engine the settings name listens (a TCP connect, no session)."""
    return bool(settings.engine) and address_answers(settings.engine)


def address_answers(url: str) -> bool:
    """Whether something listens at a Spark Connect URL's host and port (a TCP connect)."""
    host, port = engine_address(url)
    return port_open(port, host)


# What PySpark's builder sets in a process it makes a Spark Connect client.
CONNECT_CLIENT_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


def without_connect_client(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without what marks a Spark Connect client: the environment of a child
    process that starts a Spark session of its own (a stream) from a client of the engine."""
    return {k: v for k, v in environ.items() if k not in CONNECT_CLIENT_VARIABLES}


def active_profile() -> str:
    """``submitted`` inside a spark-submit driver, ``local`` otherwise."""
    return "submitted" if os.environ.get("PYSPARK_GATEWAY_PORT") else "local"

"""Kafka clients for streamshift: topic administration and the producer's settings."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from streamshift.spec.errors import StreamshiftError
from streamshift.spec.settings import Settings


class KafkaUnreachable(StreamshiftError):
    """The brokers did not answer; the message says how to start or point at them."""


# librdkafka logs each failed connection attempt (about every 50 ms) to stderr. The kit's
# short-lived clients (the CLI's, the page's) log only what is critical: an unreachable broker
# surfaces as the caller's one-line error.
QUIET = {"log_level": 2}


def client_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    """librdkafka settings for a short-lived client of the kit: the brokers and security
    options from settings, quiet logging, and ``extra``."""
    return {**settings.kafka_client_config(), **QUIET, **extra}


def reader_config(settings: Settings, group_id: str) -> dict[str, Any]:
    """A short-lived consumer that reads offsets or messages and commits nothing."""
    return client_config(settings, **{"group.id": group_id, "enable.auto.commit": False})


def admin_client(settings: Settings):  # type: ignore[no-untyped-def]
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(settings))


def ensure_topic(
    settings: Settings, name: str, partitions: int | None = None, *, compacted: bool = False
) -> bool:
    """Create ``name`` with partitions and retention from settings. False if it existed.

    ``compacted``: a changelog (the last value per key is kept, a null value deletes it).
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin_client(settings)
    if name in admin.list_topics(timeout=10).topics:
        return False
    topic = NewTopic(
        name,
        num_partitions=partitions or settings.kafka_topic_partitions,
        replication_factor=settings.kafka_replication_factor,
        config=(
            {"cleanup.policy": "compact"}
            if compacted
            else {"retention.ms": str(settings.kafka_retention_ms)}
        ),
    )
    try:
        admin.create_topics([topic], operation_timeout=30)[name].result(timeout=60)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise
    return True


def ensure_topics(settings: Settings, *names: str, compacted: Collection[str] = ()) -> None:
    """Create each topic that does not exist yet (those in ``compacted`` as changelogs), with
    no JVM: a job asks before it starts Spark. :class:`KafkaUnreachable` when no broker answers."""
    from confluent_kafka import KafkaException

    try:
        for name in names:
            ensure_topic(settings, name, compacted=name in compacted)
    except KafkaException as exc:
        raise KafkaUnreachable(unreachable(settings, exc)) from None


def unreachable(settings: Settings, exc: Exception) -> str:
    """What to say when the brokers do not answer."""
    error: Any = exc.args[0] if exc.args else exc
    # A KafkaError's own words ("Failed to get metadata: Local: Broker transport failure").
    said = error.str() if callable(getattr(error, "str", None)) else str(error)
    return (
        f"cannot reach Kafka at {settings.kafka_bootstrap_servers} ({said}); start the "
        "local broker with `streamshift kafka start` or set STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS"
    )


def producer_config(settings: Settings) -> dict[str, object]:
    """Idempotent, acks=all producer settings (no duplicates or reordering on retry)."""
    return {
        **settings.kafka_client_config(),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
        "compression.type": "lz4",
        # librdkafka warns while a fresh broker loads its coordinator; errors still show.
        "log_level": 3,
    }

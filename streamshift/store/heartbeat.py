"""Stream job heartbeats and progress, as plain files anyone can read (CLI, Airflow, reports).

Per streaming query ``<flow>-<layer>`` under ``STREAMSHIFT_HOME/status``:

* ``<name>.json``: the latest heartbeat (state, pid, last batch, rows/s, lag), replaced
  atomically on every progress or idle event;
* ``<name>.progress.jsonl``: one line per micro-batch, for lag/latency charts over the day.

Files, not a Delta table: a per-batch Delta commit would cost more than many batches do.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamshift.store.kafka import reader_config
from streamshift.store.processes import same_process


def status_dir(home: Path) -> Path:
    return home / "status"


def query_name(flow: str, layer: str) -> str:
    return f"{flow}-{layer}"


def heartbeat_path(home: Path, flow: str, layer: str) -> Path:
    return status_dir(home) / f"{query_name(flow, layer)}.json"


def restarts_path(home: Path, flow: str, layer: str) -> Path:
    """The supervisor's record of a stream's restarts (and its back-off when crash-looping)."""
    return status_dir(home) / f"{query_name(flow, layer)}.restarts"


def read_restarts(home: Path, flow: str, layer: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(restarts_path(home, flow, layer).read_text())
    except (OSError, json.JSONDecodeError):
        return {"restarts": 0}
    return data


def process_of(beat: dict[str, Any]) -> bool:
    """Whether the process a heartbeat names is alive and is the one that wrote it (pid and
    start time: a reused pid is another process)."""
    pid = beat.get("pid")
    return isinstance(pid, int) and same_process(pid, beat.get("pid_start"))


def progress_path(home: Path, flow: str, layer: str) -> Path:
    return status_dir(home) / f"{query_name(flow, layer)}.progress.jsonl"


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def write_heartbeat(path: Path, beat: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(beat, indent=1, default=str))
    tmp.replace(path)


def update_heartbeat(path: Path, beat: dict[str, Any], **changes: Any) -> None:
    """Apply ``changes`` to ``beat``, stamp ``last_seen`` and write it: what every job's
    heartbeat does on each event (``last_seen`` shows an idle job alive)."""
    beat.update(changes, last_seen=now_iso())
    write_heartbeat(path, beat)


def read_heartbeat(home: Path, flow: str, layer: str) -> dict[str, Any]:
    """The latest heartbeat of a stream job; empty when none was written (or mid-replace)."""
    try:
        beat = json.loads(heartbeat_path(home, flow, layer).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return beat if isinstance(beat, dict) else {}


def processed_events(beat: dict[str, Any], topic: str | None = None) -> int:
    """Events the job has processed: the sum of its processed offsets (of ``topic``, or all).

    Equals the number of events only on a topic whose partitions start at offset 0.
    """
    offsets = beat.get("processed_offsets") or {}
    return sum(
        sum(parts.values()) for name, parts in offsets.items() if topic is None or name == topic
    )


def append_progress(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, default=str) + "\n")


def read_progress(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def logged_events(path: Path, topic: str) -> int:
    """Events of ``topic`` a job's progress log says it has processed (offsets start at 0)."""
    highest: dict[str, int] = {}
    for batch in read_progress(path):
        for partition, offset in (batch.get("processed_offsets") or {}).get(topic, {}).items():
            highest[partition] = max(highest.get(partition, 0), offset)
    return sum(highest.values())


def offsets_lag(
    latest: dict[str, dict[str, int]] | None, processed: dict[str, dict[str, int]] | None
) -> int | None:
    """Events behind: sum over partitions of latest offset minus processed offset."""
    if not latest:
        return None
    processed = processed or {}
    return sum(
        max(0, int(end) - int(processed.get(topic, {}).get(part, 0)))
        for topic, parts in latest.items()
        for part, end in parts.items()
    )


@dataclass
class StreamStatus:
    flow: str
    layer: str
    running: bool
    beat: dict[str, Any]
    lag_now: int | None = None  # from the broker's end offsets, when it answers
    failing: str | None = None  # the supervisor backs off restarting a crash-looping job
    broker: str | None = None  # why the lag now is unknown (the broker did not answer)

    def describe(self) -> str:
        b = self.beat
        if self.running:
            state = f"running (pid {b.get('pid')})"
        elif b.get("state") == "running":
            state = f"not running (process {b.get('pid')} is gone without stopping: killed?)"
        else:
            state = f"not running ({b.get('state', 'unknown')})"
        parts = [f"{self.flow}/{self.layer}: {state}"]
        if self.failing:
            parts.append(f"FAILING: {self.failing}")
        if b.get("last_batch_at"):
            parts.append(
                f"last batch {b.get('last_batch_id')} at {b['last_batch_at']} "
                f"({_seconds_since(b['last_batch_at'])}, {b.get('input_rows', 0)} rows, "
                f"{b.get('processed_rows_per_second', 0):,.0f} rows/s)"
            )
        else:
            parts.append("no batch yet")
        working = b.get("working_on")
        if self.running and isinstance(working, dict):
            parts.append(
                f"working on batch {working.get('batch_id')} ({working.get('step_done')} done, "
                f"{_seconds_since(b.get('last_seen'))})"
            )
        if self.lag_now is not None:
            parts.append(f"lag {self.lag_now} events (broker end offsets now)")
        else:
            lag = b.get("lag")
            broker = f", {self.broker}" if self.broker else ""
            parts.append(
                f"lag {lag if lag is not None else 'unknown'} events (at the last batch{broker})"
            )
        q = b.get("quality")
        if q and q.get("error"):
            parts.append(f"data quality of batch {q['batch_id']} not checked: {q['error']}")
        elif q:
            failed = f" ({'; '.join(q['failed'])})" if q.get("failed") else ""
            parts.append(
                f"data quality of batch {q['batch_id']} ({q['suite']}): {q['pass']} pass, "
                f"{q['warn']} warn, {q['fail']} fail{failed}"
            )
        if b.get("error"):
            parts.append(f"error: {b['error']}")
        return "; ".join(parts)


def _seconds_since(stamp: str | None) -> str:
    if not stamp:
        return "when unknown"
    age = (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(stamp)).total_seconds()
    return f"{age:.0f}s ago"


class BrokerSilent(Exception):
    """The brokers did not answer a status question; the message says where they were asked."""


def broker_lag(settings, beat: dict[str, Any]) -> int | None:  # type: ignore[no-untyped-def]
    """Events on the broker not yet processed: end offsets now minus the last processed ones
    (None before the job processed any). :class:`BrokerSilent` when no broker answers."""
    processed = beat.get("processed_offsets") or {}
    if not processed:
        return None
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer(reader_config(settings, "streamshift-status"))
    try:
        # A new consumer knows no topic yet: without their metadata first, the offset query
        # fails with "Unknown partition" on a broker that answers.
        latest = {
            topic: {
                part: consumer.get_watermark_offsets(TopicPartition(topic, int(part)), timeout=5)[1]
                for part in parts
            }
            for topic, parts in processed.items()
        }
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError._UNKNOWN_PARTITION:
            return None  # the broker answered: the job's topic is gone (deleted, another broker)
        raise BrokerSilent(
            f"Kafka at {settings.kafka_bootstrap_servers} not answering: the lag now is unknown"
        ) from exc
    finally:
        consumer.close()
    return offsets_lag(latest, processed)


def read_status(home: Path, settings=None) -> list[StreamStatus]:  # type: ignore[no-untyped-def]
    """Every stream job that ever wrote a heartbeat under ``home``; with ``settings``, also
    its lag against the broker's end offsets now."""
    statuses = []
    silent: str | None = None  # a broker that did not answer is not asked again
    for path in sorted(status_dir(home).glob("*.json")):
        try:
            beat = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        running = beat.get("state") == "running" and process_of(beat)
        lag_now = None
        if settings is not None and silent is None:
            try:
                lag_now = broker_lag(settings, beat)
            except BrokerSilent as exc:
                silent = str(exc)
        flow, layer = beat.get("flow", "?"), beat.get("layer", "?")
        failing = read_restarts(home, flow, layer).get("failing")
        statuses.append(
            StreamStatus(flow, layer, running, beat, lag_now, failing=failing, broker=silent)
        )
    return statuses


def not_applied_yet(settings, flow: str, layer: str) -> str | None:  # type: ignore[no-untyped-def]
    """What a reader of ``layer`` should know about changes not in it yet, for ``trace`` and
    ``explain`` ("where's my adjustment?"): the layer's stream job is not running, or events
    on its topic wait for it. None when no stream job writes the layer or it has caught up."""
    beat = read_heartbeat(settings.home, flow, layer)
    if not beat:
        return None
    if not (beat.get("state") == "running" and process_of(beat)):
        return (
            f"the {layer} layer's stream job is not running ({beat.get('state', 'unknown')}): "
            "changes sent to its topic since its last batch are not applied (streamshift status)"
        )
    try:
        lag = broker_lag(settings, beat)
    except BrokerSilent as exc:
        return f"whether changes wait on the topic for the stream job is unknown ({exc})"
    if not lag:
        return None
    return (
        f"{lag} events on the topic are not applied yet (the stream job is working through "
        "them; streamshift status): a change sent lately may be among them"
    )

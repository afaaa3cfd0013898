"""Closing a business date at its cut-off (stage kappa), asked without a JVM.

A date may close once its cut-off plus grace (:class:`streamshift.spec.flow.CutOff`) has
passed and the stream job has committed every offset the topic held at that moment. The
offsets are the broker's: per partition, the first offset stamped at or after the moment
(``offsets_for_times``), or the partition's end when nothing came after it — so a partition
that has been idle since before the cut-off needs nothing more and cannot hold the day open.
What the stream has committed is read from its checkpoint (the end offsets of the last batch
with a commit), the same record Spark resumes from.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

from streamshift.spec import stages
from streamshift.spec.errors import StreamshiftError
from streamshift.spec.flow import Flow
from streamshift.spec.requests import CloseRequest
from streamshift.spec.settings import Settings
from streamshift.store.heartbeat import query_name, read_heartbeat
from streamshift.store.kafka import reader_config, unreachable

STREAM_LAYER = "stream"


class CloseRefused(StreamshiftError):
    """The date cannot close yet (or the request is malformed); says what it waits for."""

    final = True


@dataclass(frozen=True)
class CutOffCheck:
    flow: str
    business_date: dt.date
    at: dt.datetime  # the cut-off plus grace, UTC
    now: dt.datetime
    topic: str
    needed: dict[int, int] = field(default_factory=dict)  # partition -> offsets to commit
    committed: dict[int, int] = field(default_factory=dict)  # partition -> committed end

    @property
    def due(self) -> bool:
        return self.now >= self.at

    @property
    def behind(self) -> dict[int, int]:
        """Partitions whose committed offset is short of what the cut-off needs: events behind."""
        return offsets_behind(self.needed, self.committed)

    @property
    def ready(self) -> bool:
        return self.due and not self.behind

    def waiting_for(self) -> str:
        """What the close waits for, in words ('' when ready)."""
        if not self.due:
            return (
                f"the cut-off of {self.business_date} plus grace, {self.at:%Y-%m-%d %H:%M:%S} UTC "
                f"({(self.at - self.now).total_seconds():.0f}s from now)"
            )
        if self.behind:
            parts = ", ".join(
                f"partition {p}: committed {self.committed.get(p, 0)} of {self.needed[p]}"
                for p in self.behind
            )
            return (
                f"the stream job ({query_name(self.flow, STREAM_LAYER)}) to commit the offsets "
                f"{self.topic} held at the cut-off ({parts}); is the stream running? "
                "(streamshift status)"
            )
        return ""

    def detail(self) -> str:
        return json.dumps(
            {
                "cut_off": self.at.isoformat(),
                "topic": self.topic,
                "needed": {str(p): o for p, o in sorted(self.needed.items())},
                "committed": {str(p): o for p, o in sorted(self.committed.items())},
            }
        )


def offsets_behind(needed: dict[int, int], committed: dict[int, int]) -> dict[int, int]:
    """Per partition whose committed offset is short of the needed one: events behind."""
    return {
        p: need - committed.get(p, 0)
        for p, need in sorted(needed.items())
        if committed.get(p, 0) < need
    }


def committed_offsets(checkpoint: Path, topic: str) -> dict[int, int]:
    """The end offsets of ``topic`` the stream's last committed batch reached (empty when the
    query has committed nothing). Reads Spark's checkpoint: ``commits/<n>`` marks batch ``n``
    done; ``offsets/<n>``'s last line holds its end offsets per topic and partition."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("*") if p.name.isdigit()]
    if not commits:
        return {}
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()
    for line in reversed(lines):
        try:
            sources = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(sources, dict) and topic in sources:
            return {int(p): int(o) for p, o in sources[topic].items()}
    return {}


def topic_offsets_at(settings: Settings, topic: str, at: dt.datetime) -> dict[int, int]:
    """Per partition of ``topic``: the offsets it held at ``at`` (the first offset stamped at
    or after ``at``, or the end offset when none is)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(reader_config(settings, "streamshift-close"))
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            raise CloseRefused(
                f"topic {topic} does not exist on {settings.kafka_bootstrap_servers}: nothing has "
                "streamed for this flow; start it (streamshift stream) or close with --force "
                "--reason TEXT"
            )
        millis = int(at.timestamp() * 1000)
        asked = [TopicPartition(topic, p, millis) for p in sorted(info.partitions)]
        found = consumer.offsets_for_times(asked, timeout=10)
        out = {}
        for tp in found:
            if tp.offset >= 0:
                out[tp.partition] = tp.offset
            else:  # nothing at or after ``at``: everything it holds came before
                out[tp.partition] = consumer.get_watermark_offsets(tp, timeout=10)[1]
        return out
    except KafkaException as exc:
        raise CloseRefused(
            f"the cut-off needs the offsets of {topic}: {unreachable(settings, exc)}"
        ) from None
    finally:
        consumer.close()


def stream_topic(settings: Settings, flow: Flow) -> str:
    """The topic the flow's stream job reads: the one its heartbeat names, else the flow's
    (``streamshift.store.events.topic_for``)."""
    beat = read_heartbeat(settings.home, flow.name, STREAM_LAYER) or {}
    return str(beat.get("topic") or flow.name)


def check_cut_off(
    settings: Settings, flow: Flow, business_date: dt.date, now: dt.datetime | None = None
) -> CutOffCheck:
    """Whether ``business_date`` may close at its cut-off now, and what it waits for. The
    topic is the one the stream job reads (its heartbeat names it), else the flow's."""
    now = now or dt.datetime.now(dt.UTC)
    at = flow.cut_off.at(business_date)
    topic = stream_topic(settings, flow)
    check = CutOffCheck(flow.name, business_date, at, now, topic)
    if not check.due:
        return check
    checkpoint = settings.checkpoints / query_name(flow.name, STREAM_LAYER)
    return CutOffCheck(
        flow.name,
        business_date,
        at,
        now,
        topic,
        topic_offsets_at(settings, topic, at),
        committed_offsets(checkpoint, topic),
    )


def close_gate(
    settings: Settings, flow: Flow, request: CloseRequest, now: stages.Stage
) -> CutOffCheck | None:
    """The close's gate, without a JVM: ``None`` for a forced close (with its reason), else a
    ready check; raises :class:`CloseRefused` saying what the close waits for."""
    if request.force:
        if not (request.reason and request.reason.strip()):
            raise CloseRefused("--force needs --reason TEXT: a forced close is recorded with why")
        return None
    if now.closes_by != stages.BY_CUT_OFF:
        raise CloseRefused(
            f"{request.flow} is in stage {now.name}, where a day closes by its "
            f"{now.closes_by.replace('_', ' ')}, not at a cut-off; pass --force --reason TEXT "
            "to close it anyway"
        )
    found = check_cut_off(settings, flow, request.business_date)
    if not found.ready:
        raise CloseRefused(
            f"{request.flow} {request.business_date} cannot close yet: waiting for "
            f"{found.waiting_for()}"
        )
    return found

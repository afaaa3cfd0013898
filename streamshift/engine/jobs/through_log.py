"""Changes through the log: once a flow streams, the stream job is its layer's single writer,
so a job with changes for the stream layer (an EOD file's corrections and a replacement's
cancels, re-driven quarantine rows) produces them to the flow's topic, with where they come
from in Kafka headers (``source``, ``source_ref``), and returns once the stream job has
committed them. A replay of the topic then reproduces them and ``serve`` sees them."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streamshift.control.cutoff import committed_offsets, offsets_behind, stream_topic
from streamshift.spec.contract import SOURCE, SOURCE_HEADER, SOURCE_REF, SOURCE_REF_HEADER
from streamshift.spec.errors import StreamshiftError
from streamshift.store.heartbeat import query_name
from streamshift.store.produce import produce_rows

if TYPE_CHECKING:
    from streamshift.spec.flow import Flow
    from streamshift.spec.settings import Settings
    from streamshift.store.produce import ProduceResult


class NotApplied(StreamshiftError):
    """The changes were produced but the stream job did not commit them in time (a retry
    produces the same messages, and the stream keeps one copy of each)."""


def produce_and_wait(
    settings: Settings,
    flow: Flow,
    layer: str,
    rows: Sequence[Mapping[str, Any]],
    what: str,
) -> tuple[str, ProduceResult]:
    """Produce ``rows`` (the flow's columns, ``_source``, ``_source_ref``) to the topic the
    stream job of ``layer`` reads; wait until that job has committed them. ``what`` names
    them in messages ("corrections of day.csv")."""

    topic = stream_topic(settings, flow)
    _say(f"producing {len(rows)} {what} to {topic}")
    sent = produce_rows(
        settings,
        flow,
        list(rows),
        topic=topic,
        progress=False,
        headers=lambda r: [
            (SOURCE_HEADER, str(r[SOURCE]).encode()),
            (SOURCE_REF_HEADER, str(r[SOURCE_REF]).encode()),
        ],
    )
    if sent.failed:
        raise NotApplied(f"the {what} were not all delivered: {sent.describe()}")
    job = query_name(flow.name, layer)
    checkpoint = settings.checkpoints / job
    deadline = time.monotonic() + settings.correction_wait_seconds
    last_said = 0.0
    while True:
        behind = offsets_behind(sent.ends, committed_offsets(checkpoint, topic))
        if not behind:
            return topic, sent
        if time.monotonic() > deadline:
            raise NotApplied(
                f"the stream job ({job}) has not applied the {what} produced to {topic} within "
                f"{settings.correction_wait_seconds}s (events behind per partition: {behind}); "
                "is it running? (streamshift status; the stream_supervisor DAG restarts it). "
                "Run this again once it is: it produces the same messages and the stream keeps "
                "one copy of each"
            )
        if time.monotonic() - last_said > 30:
            last_said = time.monotonic()
            _say(f"waiting for the stream job to apply the {what} ({behind} behind)")
        time.sleep(0.5)


def _say(message: str) -> None:
    print(f"[streamshift] {message}", file=sys.stderr, flush=True)

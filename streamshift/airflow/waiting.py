"""The EOD DAG's wait for its file: deferred (holding no worker slot) until the file has
arrived *and* is complete as its flow declares — a done-marker, a trailer line, or a size that
stopped changing — so a half-copied file is never loaded.

The trigger runs in Airflow's triggerer and asks :func:`streamshift.store.eodfile.waiting_for`
(pure Python, no pyspark) every ``poke_interval`` seconds, or sooner when a file that has
arrived completes its stability window before then. A file that has arrived and only has to
settle for less than a poll is waited for in the task itself: deferring, the trigger's first
poll and the task's resumption would cost more than the wait.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent

from streamshift.spec.flow import Completeness
from streamshift.spec.registry import get_flow
from streamshift.store.eodfile import settles_in, waiting_for

# The trigger polls at most this far apart; a file due to settle within it is awaited in place.
POLL_SECONDS = 5.0
# Past the end of a stability window, so the next look finds the file complete.
_SETTLED_MARGIN = 0.05


class CompleteFileTrigger(BaseTrigger):
    """Fires once ``path`` exists and is complete."""

    def __init__(
        self,
        path: str,
        stable_seconds: float,
        marker: bool = False,
        trailer: str | None = None,
        trailer_sum: str | None = None,
        poke_interval: float = POLL_SECONDS,
    ):
        super().__init__()
        self.path, self.stable_seconds, self.poke_interval = path, stable_seconds, poke_interval
        self.completeness = Completeness(marker=marker, trailer=trailer, trailer_sum=trailer_sum)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{__name__}.CompleteFileTrigger",
            {
                "path": self.path,
                "stable_seconds": self.stable_seconds,
                "marker": self.completeness.marker,
                "trailer": self.completeness.trailer,
                "trailer_sum": self.completeness.trailer_sum,
                "poke_interval": self.poke_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:

        path, last = Path(self.path), None
        while True:
            missing = waiting_for(path, self.completeness, self.stable_seconds)
            if not missing:
                yield TriggerEvent({"file": self.path})
                return
            if missing != last:
                self.log.info("%s: waiting for %s", self.path, missing)
                last = missing
            left = settles_in(path, self.completeness, self.stable_seconds)
            pause = self.poke_interval if left is None else left + _SETTLED_MARGIN
            await asyncio.sleep(min(self.poke_interval, pause))


class CompleteFileSensor(BaseSensorOperator):
    """Wait, deferred, for the flow's file to arrive and be complete."""

    template_fields: Sequence[str] = ("filepath",)

    def __init__(self, *, filepath: str, flow: str, stable_seconds: float, **kwargs: Any):
        kwargs.setdefault("poke_interval", 30)
        super().__init__(**kwargs)
        self.filepath, self.flow, self.stable_seconds = filepath, flow, stable_seconds

    def _completeness(self) -> Completeness:

        return get_flow(self.flow).completeness

    def poke(self, context: Any) -> bool:

        missing = waiting_for(Path(self.filepath), self._completeness(), self.stable_seconds)
        if missing:
            self.log.info("%s: waiting for %s", self.filepath, missing)
        return not missing

    def on_complete(self, context: Any) -> None:
        """What runs once the file is complete, in the same task (nothing by default)."""

    def execute(self, context: Any) -> None:

        if self.poke(context):
            self.on_complete(context)
            return
        completeness = self._completeness()
        left = settles_in(Path(self.filepath), completeness, self.stable_seconds)
        if left is not None and left <= POLL_SECONDS:
            self.log.info("%s: waiting %.1fs here for it to settle", self.filepath, left)
            time.sleep(left + _SETTLED_MARGIN)
            if self.poke(context):
                self.on_complete(context)
                return
        self.defer(
            timeout=dt.timedelta(seconds=self.timeout),
            trigger=CompleteFileTrigger(
                path=self.filepath,
                stable_seconds=self.stable_seconds,
                marker=completeness.marker,
                trailer=completeness.trailer,
                trailer_sum=completeness.trailer_sum,
                poke_interval=min(float(self.poke_interval), POLL_SECONDS),
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> None:
        if not event:
            raise RuntimeError(f"{self.filepath} never became complete")
        self.log.info("%s is complete", event["file"])
        self.on_complete(context)

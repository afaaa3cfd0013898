"""How one apply runs its steps: the critical path on the caller's thread, the independent
writes (quarantine, history, redeliveries, late events, each view) on a few threads beside it
(Spark runs jobs from several threads at once, and much of a Delta commit is driver time), every
step timed and awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Self


class Timer:
    """Per-step timings of one apply, for the benchmark and the curious (STREAMSHIFT debug);
    ``on_step`` hears of each step as it ends (a stream job's heartbeat, during a long batch)."""

    def __init__(self, on_step: Callable[[str], None] | None = None) -> None:
        self.steps: dict[str, float] = {}
        self._last = time.perf_counter()
        self._on_step = on_step

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.done(step, now - self._last)
        self._last = now

    def done(self, step: str, seconds: float) -> None:
        self.steps[step] = self.steps.get(step, 0.0) + seconds
        if self._on_step is not None:
            self._on_step(step)


class Steps:
    """Independent write steps of one apply on a few threads; every step is awaited.

    Leaving the block waits for all submitted steps and re-raises the first failure, so a
    failed step never leaves another one running against tables the caller goes on to touch.
    """

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="apply")
        self._futures: dict[str, Future[object]] = {}

    def __enter__(self) -> Self:
        return self

    def settle(self) -> None:
        """Wait for every submitted step, failed or not."""
        wait(self._futures.values())

    def __exit__(self, *exc: object) -> None:
        try:
            self.settle()
            if exc[0] is None:
                for future in self._futures.values():
                    future.result()
        finally:
            self._pool.shutdown(wait=True)

    def _timed(self, name: str, fn: Callable[..., object], *args: object) -> object:
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.timer.done(name, time.perf_counter() - started)

    def submit(self, name: str, fn: Callable[..., object], *args: object) -> None:
        self._futures[name] = self._pool.submit(self._timed, name, fn, *args)

    def run(self, name: str, fn: Callable[..., Any], *args: object) -> Any:
        """Run ``fn`` on the caller's thread (the critical path), timed."""
        return self._timed(name, fn, *args)

    def wait_if_submitted(self, name: str) -> None:
        if name in self._futures:
            self._futures[name].result()

    def wait(self, *names: str) -> None:
        for name in names:
            self._futures[name].result()

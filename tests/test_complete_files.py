"""Complete files only: a done-marker, a trailer with control totals, or a stable size. A file
copied half-way is never loaded, and a replacement copied in two halves never retracts a
trade of its second half."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import os
import threading
import time
from pathlib import Path

import pytest

from flows.trades import FLOW
from streamshift.spec.flow import Completeness
from streamshift.store.eodfile import (
    IncompleteFileError,
    settles_in,
    wait_until_complete,
    waiting_for,
)
from tests.cli_support import run_cli

DAY = dt.date(2026, 11, 20)
HEADER = [f.name for f in FLOW.schema.fields]
TRAILED = dataclasses.replace(
    FLOW, completeness=Completeness(trailer="TRAILER", trailer_sum="quantity")
)
MARKED = dataclasses.replace(FLOW, completeness=Completeness(marker=True))


def _rows(n: int, start: int = 0) -> list[list[str]]:
    return [
        [f"T{i:03}", "1", "NEW", str(DAY), f"{DAY}T10:00:00Z", "EQ-US-FLOW", "AAPL", "BUY"]
        + [str(i + 1), "10.00", "USD"]
        for i in range(start, start + n)
    ]


def _write(path: Path, rows: list[list[str]], trailer: list[str] | None = None) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(rows)
        if trailer:
            writer.writerow(trailer)
    return path


def test_what_each_declaration_waits_for(tmp_path) -> None:
    path = _write(tmp_path / "day.csv", _rows(3))
    assert "done-marker" in waiting_for(path, MARKED.completeness, 0)
    (tmp_path / "day.csv.done").touch()
    assert waiting_for(path, MARKED.completeness, 0) == ""
    assert "trailer" in waiting_for(path, TRAILED.completeness, 0)
    _write(path, _rows(3), ["TRAILER", "3", "6"])
    assert waiting_for(path, TRAILED.completeness, 0) == ""
    # neither: the size must have stayed the same for the stability window
    assert "stay the same" in waiting_for(path, FLOW.completeness, 60)
    old = time.time() - 120
    os.utime(path, (old, old))
    assert waiting_for(path, FLOW.completeness, 60) == ""
    with pytest.raises(IncompleteFileError, match="done-marker"):
        wait_until_complete(_write(tmp_path / "other.csv", _rows(1)), MARKED, 0)


def test_a_file_still_growing_is_refused_with_what_it_waits_for(tmp_path) -> None:
    path = _write(tmp_path / "day.csv", _rows(5))
    rows = _rows(5, start=5)

    def copy_the_rest() -> None:
        time.sleep(0.5)
        with open(path, "a", newline="") as handle:
            csv.writer(handle, lineterminator="\n").writerows(rows)

    copier = threading.Thread(target=copy_the_rest)
    copier.start()
    try:
        with pytest.raises(IncompleteFileError, match="stop changing"):
            wait_until_complete(path, FLOW, 2)
    finally:
        copier.join()
    wait_until_complete(path, FLOW, 0.5)  # once the copy has finished, it passes


def test_the_cli_refuses_a_file_being_copied_before_spark_starts(tmp_path) -> None:
    path = _write(tmp_path / "day.csv", _rows(5))

    def copy_the_rest() -> None:
        time.sleep(1.0)
        with open(path, "a", newline="") as handle:
            csv.writer(handle, lineterminator="\n").writerows(_rows(5, start=5))

    copier = threading.Thread(target=copy_the_rest)
    copier.start()
    result = run_cli(
        tmp_path / "home",
        *("eod", "--flow", "trades", "--date", str(DAY), "--file", str(path)),
        file_stable_seconds="4",
    )
    copier.join()
    assert result.returncode != 0
    assert "incomplete" in result.stderr and "stop changing" in result.stderr, result.stderr
    assert "starting Spark" not in result.stderr
    assert not (tmp_path / "home" / "warehouse").exists()


@pytest.mark.spark
@pytest.mark.slow
def test_a_replacement_copied_in_two_halves_never_retracts_its_second_half(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from streamshift.engine.jobs.eod import run_eod
    from streamshift.engine.write.target import Target, load_reference, read
    from streamshift.spec.catalog import LayerTables
    from streamshift.store.eodfile import BadFileError

    target = Target(
        spark, TRAILED, LayerTables(tmp_path / "wh", TRAILED, "batch"), load_reference(spark, FLOW)
    )
    day = _rows(20)
    run_eod(spark, target, DAY, _write(tmp_path / "day.csv", day, ["TRAILER", "20", "210"]))

    def live() -> dict[str, int]:
        return {
            r.trade_id: r.version
            for r in read(spark, target.tables.current).collect()
            if not r.is_deleted
        }

    assert live() == {r[0]: 1 for r in day}
    # The replacement drops T000 and T001; its first half (ending on a line end) arrives first.
    replacement = day[2:]
    half = _write(tmp_path / "replacement.csv", replacement[:9])
    with pytest.raises(IncompleteFileError, match="trailer"):
        run_eod(spark, target, DAY, half, replace=True)
    assert live() == {r[0]: 1 for r in day}  # nothing retracted, nothing written
    # A trailer that does not match the rows (a line lost in the copy) is refused too.
    total = sum(int(r[8]) for r in replacement)
    lost = _write(
        tmp_path / "lost.csv", replacement[:5] + replacement[6:], ["TRAILER", "18", str(total)]
    )
    with pytest.raises(BadFileError, match="control totals differ"):
        run_eod(spark, target, DAY, lost, replace=True)
    assert live() == {r[0]: 1 for r in day}
    # The whole file, trailer last: only the two trades it lacks are cancelled.
    whole = _write(tmp_path / "whole.csv", replacement, ["TRAILER", "18", str(total)])
    result = run_eod(spark, target, DAY, whole, replace=True)
    assert (result.cancelled, result.apply.received) == (2, 20)
    assert live() == {r[0]: 1 for r in replacement}


def test_the_eod_dags_trigger_fires_only_once_the_file_is_complete(tmp_path) -> None:
    """What the deferred ``wait_for_eod_file`` waits on in Airflow's triggerer: no event while
    the marker is missing; one once it is there; it serializes to itself."""
    import asyncio

    from streamshift.airflow.waiting import CompleteFileTrigger

    path = _write(tmp_path / "day.csv", _rows(3))
    trigger = CompleteFileTrigger(str(path), 0, marker=True, poke_interval=0.05)

    def first_event(timeout: float):  # type: ignore[no-untyped-def]
        return asyncio.run(asyncio.wait_for(anext(trigger.run()), timeout))

    with pytest.raises(TimeoutError):
        first_event(0.5)
    (tmp_path / "_SUCCESS").touch()
    assert first_event(5).payload == {"file": str(path)}
    classpath, kwargs = trigger.serialize()
    assert CompleteFileTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_a_file_that_only_has_to_settle_is_taken_when_its_window_ends(tmp_path) -> None:
    """A file that has arrived whole, waited for by its size staying the same: the trigger
    fires when the stability window ends, not at its next poll; the sensor waits out a window
    shorter than a poll in the task instead of deferring, and defers for a missing file."""
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred

    from streamshift.airflow.waiting import CompleteFileSensor, CompleteFileTrigger

    path = _write(tmp_path / "day.csv", _rows(3))
    assert settles_in(tmp_path / "absent.csv", FLOW.completeness, 3) is None
    assert settles_in(path, MARKED.completeness, 3) is None  # a marker, not time, completes it
    assert 2 < settles_in(path, FLOW.completeness, 3) <= 3  # type: ignore[operator]
    old = time.time() - 120
    os.utime(path, (old, old))
    assert settles_in(path, FLOW.completeness, 3) == 0

    # The trigger polls every 60 s; the file completes its 1-s window long before that.
    os.utime(path)
    trigger = CompleteFileTrigger(str(path), 1, poke_interval=60)
    started = time.time()
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), 30))
    assert event.payload == {"file": str(path)}
    assert time.time() - path.stat().st_mtime >= 1  # not before the window ended

    def sensor(file: Path) -> CompleteFileSensor:
        return CompleteFileSensor(
            task_id="wait", filepath=str(file), flow=FLOW.name, stable_seconds=1
        )

    os.utime(path)
    sensor(path).execute({})  # returns: complete, with no deferral
    assert time.time() - path.stat().st_mtime >= 1
    with pytest.raises(TaskDeferred):
        sensor(tmp_path / "absent.csv").execute({})
    assert time.time() - started < 60  # neither waited for a poll

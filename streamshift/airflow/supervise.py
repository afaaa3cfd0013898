"""Supervising the streaming jobs: a dead or stalled job is restarted from its checkpoint.

Run by the ``stream_supervisor`` DAG every few minutes. A job is *dead* when its heartbeat
says running but its process is gone (killed, crashed) or says failed; *stalled* when its
process lives but its heartbeat is older than ``STREAMSHIFT_STREAM_STALL_SECONDS``. Either
is restarted as a detached ``spark-submit streaming/run.py``; it resumes from its checkpoint,
so nothing is lost or applied twice. A healthy job is left alone. Restarts are counted in
``STREAMSHIFT_HOME/status/<flow>-<layer>.restarts``. A job an operator stopped stays stopped
until they start it; a job restarted ``CRASH_RESTARTS`` times within ``CRASH_WINDOW`` is
crash-looping: it is restarted with a growing back-off and shows as ``failing`` in
``streamshift status`` and on the Migration page.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from streamshift.entry import STREAM_JOB
from streamshift.spec.registry import flow_names
from streamshift.spec.settings import Settings
from streamshift.spec.stages import stage as stage_of
from streamshift.store import heartbeat
from streamshift.store.heartbeat import query_name, read_heartbeat
from streamshift.store.processes import pid_alive
from streamshift.store.records import current_stage

LAYER = "stream"


# A job restarted this many times within CRASH_WINDOW is crash-looping: the next restart
# waits BACKOFF, doubled for each further restart, up to MAX_BACKOFF.
CRASH_RESTARTS = 3
CRASH_WINDOW = dt.timedelta(minutes=30)
BACKOFF = dt.timedelta(minutes=5)
MAX_BACKOFF = dt.timedelta(hours=2)


def restarts_path(settings: Settings, flow: str, layer: str = LAYER) -> Path:
    return heartbeat.restarts_path(settings.home, flow, layer)


def read_restarts(settings: Settings, flow: str, layer: str = LAYER) -> dict[str, Any]:
    return heartbeat.read_restarts(settings.home, flow, layer)


def health(beat: dict[str, Any], stall_seconds: int, now: dt.datetime) -> tuple[str, str]:
    """('healthy' | 'dead' | 'stalled' | 'stopped' | 'never_started', why) for a heartbeat.

    The process is the heartbeat's pid *and* start time: after the job died, its pid may name
    another process. ``stopped`` is an operator's stop, honoured until they start it again."""
    if not beat:
        return "never_started", "no heartbeat: the job never ran here"
    pid = beat.get("pid")
    alive = heartbeat.process_of(beat)
    state = beat.get("state")
    if state == "stopped":
        return "stopped", f"stopped at {beat.get('stopped_at') or beat.get('last_seen')}"
    if state == "failed" or not alive:
        return "dead", f"state {state}, process {pid} {'alive' if alive else 'gone'}"
    seen = dt.datetime.fromisoformat(beat.get("last_seen") or beat["started_at"])
    age = (now - seen).total_seconds()
    if age > stall_seconds:
        return "stalled", f"no heartbeat for {age:.0f}s (limit {stall_seconds}s)"
    return "healthy", f"heartbeat {age:.0f}s ago, lag {beat.get('lag')}"


def backoff_until(restarted_at: list[str], now: dt.datetime) -> dt.datetime | None:
    """When a crash-looping job may be restarted next (None: it is not crash-looping)."""
    recent = sorted(
        t for t in map(dt.datetime.fromisoformat, restarted_at) if now - t <= CRASH_WINDOW
    )
    if len(recent) < CRASH_RESTARTS:
        return None
    wait = min(MAX_BACKOFF, BACKOFF * 2 ** (len(recent) - CRASH_RESTARTS))
    return recent[-1] + wait


def start_stream(settings: Settings, flow: str, topic: str | None) -> int:
    """Start the flow's streaming job detached (its own session); return its pid."""
    from streamshift.engine.spark import submit_args

    log = settings.home / "logs" / f"stream-{flow}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    spark_submit = Path(sys.executable).parent / "spark-submit"
    command = [
        # spark-submit's JVM starts first: the niceness is set for it here (STREAMSHIFT_STREAM_NICE)
        *(["nice", "-n", str(settings.stream_nice)] if settings.stream_nice else []),
        str(spark_submit),
        *submit_args(settings),
        str(STREAM_JOB),
        "--flow",
        flow,
        *(["--topic", topic] if topic else []),
    ]
    env = {
        **os.environ,
        "STREAMSHIFT_HOME": str(settings.home),
        "PATH": f"{spark_submit.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        "PYSPARK_PYTHON": sys.executable,
    }
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            command,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc.pid


def _stop(pid: int, timeout: float = 60) -> None:
    """Stop a stalled job: SIGTERM (it finishes its batch), SIGKILL if it does not."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(1)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def supervise(settings: Settings, stages: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Check each flow's stream; restart the dead or stalled ones. One action per flow."""

    now = dt.datetime.now(dt.UTC)
    actions: list[dict[str, Any]] = []
    for flow in flow_names():
        stage = (stages or {}).get(flow) or current_stage(settings, flow)
        name = query_name(flow, LAYER)
        if not stage_of(stage).streams:
            actions.append(
                {"flow": flow, "action": "none", "line": f"{name}: stage {stage} runs no stream"}
            )
            continue
        beat = read_heartbeat(settings.home, flow, LAYER)
        state, why = health(beat, settings.stream_stall_seconds, now)
        counts = read_restarts(settings, flow)
        if state in ("healthy", "stopped"):
            line = f"{name}: {state} ({why})" + (
                "; left stopped until an operator starts it" if state == "stopped" else ""
            )
            if state == "healthy" and counts.get("failing"):
                _write_restarts(settings, flow, {**counts, "failing": None})
            actions.append({"flow": flow, "action": "none", "state": state, "line": line})
            continue
        history = [t for t in counts.get("restarted_at", []) if isinstance(t, str)]
        until = backoff_until(history, now)
        if until is not None and now < until:
            failing = (
                f"restarted {len(history)} times, crash-looping ({state}: {why}); next try "
                f"after {until.isoformat(timespec='seconds')}"
            )
            _write_restarts(settings, flow, {**counts, "failing": failing})
            actions.append(
                {
                    "flow": flow,
                    "action": "backing_off",
                    "state": "failing",
                    "line": f"{name}: failing: {failing}",
                }
            )
            continue
        if state == "stalled":
            _stop(int(beat["pid"]))
        pid = start_stream(settings, flow, beat.get("topic"))
        history = [t for t in history if now - dt.datetime.fromisoformat(t) <= CRASH_WINDOW]
        counts = {
            "restarts": int(counts.get("restarts", 0)) + 1,
            "last_at": now.isoformat(),
            "last_reason": f"{state}: {why}",
            "pid": pid,
            "restarted_at": [*history, now.isoformat()],
            "failing": counts.get("failing"),
        }
        _write_restarts(settings, flow, counts)
        actions.append(
            {
                "flow": flow,
                "action": "restarted",
                "state": state,
                "pid": pid,
                "restarts": counts["restarts"],
                "line": f"{name}: {state} ({why}); restarted from its checkpoint as pid "
                f"{pid} (restart #{counts['restarts']})",
            }
        )
    return actions


def _write_restarts(settings: Settings, flow: str, counts: dict[str, Any]) -> None:
    path = restarts_path(settings, flow)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(counts))
    tmp.replace(path)

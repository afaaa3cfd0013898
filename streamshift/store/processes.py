"""Process and port helpers shared by the local services (broker, Airflow) and status reads."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); look at its state.
    try:
        state = stat_fields(Path(f"/proc/{pid}/stat").read_text())[0]
    except OSError:
        return True
    return state != "Z"


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``; None without it).
    With the pid it names one process: a pid the kernel reuses comes with another start."""
    try:
        return int(stat_fields(Path(f"/proc/{pid}/stat").read_text())[19])
    except (OSError, IndexError, ValueError):
        return None


def same_process(pid: int, started: int | None) -> bool:
    """Whether ``pid`` is alive and is still the process that started at ``started`` (a
    record without a start time is trusted on its pid alone)."""
    if not pid_alive(pid):
        return False
    now = process_start(pid)
    return started is None or now is None or now == started


def stat_fields(text: str) -> list[str]:
    """A ``/proc/<pid>/stat`` line's fields after the command name (which may hold spaces and
    parentheses): state, parent pid, process group, ..."""
    return text[text.rindex(")") + 2 :].split()


def process_stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, :func:`stat_fields`) of every process now (Linux: from ``/proc``); one that exits
    while they are read is left out."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited while we looked
        yield int(stat.parent.name), stat_fields(text)


def cpu_seconds(fields: list[str]) -> float:
    """The user and system CPU a process has used, from its :func:`stat_fields`."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid`` (Linux: from ``/proc``). A
    group can outlive its leader: children that ignore SIGTERM live on."""
    return [
        pid
        for pid, (state, _ppid, group, *_) in process_stats()
        if state != "Z" and int(group) == pgid
    ]


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a live process left."""
    if Path("/proc").is_dir():
        return bool(group_members(pgid))
    try:
        os.killpg(pgid, 0)  # no /proc: a zombie leader counts as alive here
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lower_priority(niceness: int) -> int:
    """Raise this process's niceness to at least ``niceness`` (never lowers it; children
    started afterwards, such as the Spark JVM, inherit it); the niceness now."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if niceness > current:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    return os.getpriority(os.PRIO_PROCESS, 0)


def os_user() -> str:
    """The user running this process (recorded as who changed a stage or closed a day)."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def reap(pid: int) -> None:
    """Collect ``pid``'s exit status if it is a child of this process that ended."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ('' when it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def terminate(pid: int, timeout: float = 60.0) -> None:
    """Stop process ``pid``: SIGTERM, then SIGKILL when it is still alive after ``timeout``
    seconds (a local service's stop)."""
    import signal
    import time

    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        reap(pid)
        time.sleep(0.2)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        reap(pid)

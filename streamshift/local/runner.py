"""The local engine's job runner: a command's job runs in a process that is ready before the
command starts.

A command that runs a job on the engine spends a second or so of its own around the job:
importing PySpark's Connect client (with pandas, pyarrow and gRPC) and the write path,
opening a Connect session, closing it. The runner, started with the local engine, keeps one
process ready with all of that done. A command (``_run_request`` in the CLI) checks its
request as before, then hands the runner the request, its environment, its working folder and
its stdout and stderr (the descriptors themselves, over a Unix socket), and exits with the
status the runner sends back.

Each request runs in a process of its own, forked from the runner (which holds the imports
and nothing else: no session, no thread), so the job's process stays what it was: the
command's Ctrl-C and SIGTERM reach it, it is SIGKILLed when the command's connection drops
(a killed command), and the fault-injection exit (``STREAMSHIFT_KILL_AFTER_COMMITS``) ends it
with the status a killed command has. Once it has answered a job that succeeded, the job's
process computes the state of the Delta tables it committed to (listing their files) while the
engine is otherwise idle, so that the next job's MERGE into them finds the state of their latest
version computed; then it exits. When the next job starts first, the process leaves the tables
it has not reached yet to that job, which computes the state it needs as it goes, instead of
taking the engine's cores from it (bench/engine_latency.py's back-to-back corrections).

A command runs the job in a Connect session of its own, as without a runner, when none
answers: no runner started, an engine on another host, or no process ready within
:data:`HAND_OVER_SECONDS`. The socket lives in a folder only its user can enter.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from streamshift.spec.registry import flow_names, forget_stale, get_flow
from streamshift.spec.requests import JobRequest
from streamshift.store.endpoints import (
    CONNECT_CLIENT_VARIABLES,
    LOOPBACK,
    address_answers,
    engine_address,
)

# How long a command waits for a ready process before running the job itself.
HAND_OVER_SECONDS = 20.0
# How long the runner waits after a process died before it was ready (the engine down?):
# doubled on each such death in a row, up to the most.
RESTART_BACKOFF_SECONDS = 2.0
RESTART_BACKOFF_MOST_SECONDS = 60.0
# How often a ready process, waiting for a command, keeps its engine session open.
KEEPALIVE_SECONDS = 300.0
_HEADER = struct.Struct("!I")
# The runner to a process that has answered its job: another job has started.
YIELD = b"yield"


def socket_path(port: int) -> Path:
    """Where the runner of the local engine on ``port`` listens."""
    return Path(tempfile.gettempdir()) / f"streamshift-{os.getuid()}" / f"runner-{port}.sock"


# -- the command's side (JVM-free, no heavy imports) ---------------------------------------


def hand_over(request: JobRequest, engine_url: str) -> int | None:
    """Run ``request`` in the runner of the local engine at ``engine_url``: the job's exit
    status, or None when no runner took it (the caller runs it itself)."""
    host, port = engine_address(engine_url)
    path = socket_path(port)
    if host not in LOOPBACK or not _ours(path):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        header = json.dumps(
            {"request": request.to_json(), "env": dict(os.environ), "cwd": os.getcwd()}
        ).encode()
        sys.stdout.flush()
        sys.stderr.flush()
        message = _HEADER.pack(len(header)) + header
        sent = socket.send_fds(conn, [message], [1, 2])
        conn.sendall(message[sent:])
        conn.settimeout(HAND_OVER_SECONDS)
        if _read_line(conn) != "ok":
            conn.close()
            return None
    except OSError:  # no runner listening, or none ready in time
        conn.close()
        return None
    conn.settimeout(None)
    return _await_status(conn)


def _ours(path: Path) -> bool:
    """Whether ``path`` is a socket in a folder only this user can enter (the command hands
    over its environment and its output: never to another user's process)."""
    try:
        folder = path.parent.stat()
        return path.is_socket() and folder.st_uid == os.getuid() and not folder.st_mode & 0o077
    except OSError:
        return False


def _await_status(conn: socket.socket) -> int:
    """Forward the command's signals to the job's process until its status arrives."""

    def forward(signum: int, _frame: object) -> None:
        try:
            conn.sendall(f"sig {signum}\n".encode())
        except OSError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        line = _read_line(conn)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        conn.close()
    if line.startswith("rc "):
        return int(line[3:])
    print(
        "streamshift: error: the engine's job runner ended before the job did; run the "
        "command again (see the runner's log under STREAMSHIFT_HOME/engine of the engine)",
        file=sys.stderr,
    )
    return 1


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


# -- the runner ------------------------------------------------------------------------------


@dataclass
class _Child:
    pid: int
    control: socket.socket
    client: socket.socket | None = None  # once it took a command
    answered: bool = False


class Runner:
    """The runner's parent process: keeps a process ready, relays each job's status."""

    def __init__(self, url: str, path: Path) -> None:
        self.url = url
        self.path = path
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, _Child] = {}
        self.ready: _Child | None = None
        self.stopping = False
        self.not_before = 0.0
        self.backoff = RESTART_BACKOFF_SECONDS

    def serve(self) -> None:
        _preload()
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path.parent, 0o700)
        self.path.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(16)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self.selector.register(wake_r, selectors.EVENT_READ, "wake")
        print(f"[runner] serving {self.url} at {self.path}", flush=True)
        try:
            while not self.stopping:
                self._keep_one_ready()
                for key, _ in self.selector.select(timeout=1.0):
                    try:
                        self._on_event(key.data, key.fileobj)
                    except Exception:  # noqa: BLE001 - one bad exchange must not end the others
                        traceback.print_exc()
                self._reap()
        finally:
            self.path.unlink(missing_ok=True)
            for child in list(self.children.values()):
                _kill(child.pid, signal.SIGTERM)
            self._reap(wait=5.0)

    def _stop(self, *_: object) -> None:
        self.stopping = True

    def _keep_one_ready(self) -> None:
        """A ready process when idle, or when a command waits and none is ready."""
        if self.ready is not None or time.monotonic() < self.not_before:
            return
        busy = any(c.client is not None for c in self.children.values())
        if busy and not _readable(self.listener):
            return
        self.ready = self._fork()

    def _fork(self) -> _Child:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the job's process: never returns
            ours.close()
            _child_main(self.listener, theirs, self.url, os.getppid())
        theirs.close()
        child = _Child(pid, ours)
        self.children[pid] = child
        self.selector.register(ours, selectors.EVENT_READ, ("control", pid))
        return child

    def _on_event(self, data: object, fileobj: object) -> None:
        if data == "wake":
            try:
                os.read(fileobj, 512)  # type: ignore[arg-type]
            except BlockingIOError:
                pass
            return
        kind, pid = cast(tuple[str, int], data)
        child = self.children.get(pid)
        if child is None:
            return
        if kind == "control":
            self._from_child(child)
        else:
            self._from_command(child)

    def _from_child(self, child: _Child) -> None:
        try:
            message, fds, _flags, _addr = socket.recv_fds(child.control, 64, 1)
        except OSError:
            message, fds = b"", []
        if not message:  # the process exited; _reap relays its status
            self._forget(child.control)
            return
        if message == b"ready":
            self.backoff = RESTART_BACKOFF_SECONDS
        elif message == b"taken" and fds:
            child.client = socket.socket(fileno=fds[0])
            self.selector.register(child.client, selectors.EVENT_READ, ("command", child.pid))
            if self.ready is child:
                self.ready = None
            for other in self.children.values():  # still warming what the job before wrote
                if other.answered:
                    with contextlib.suppress(OSError):
                        other.control.send(YIELD)
        elif message.startswith(b"rc:"):
            self._answer(child, int(message[3:]))

    def _from_command(self, child: _Child) -> None:
        assert child.client is not None
        try:
            data = child.client.recv(64)
        except OSError:
            data = b""
        if not data:  # the command is gone (killed): so is its job
            self._drop_client(child)
            if not child.answered:
                _kill(child.pid, signal.SIGKILL)
            return
        for line in data.decode(errors="replace").splitlines():
            if line.startswith("sig ") and line[4:].isdigit() and not child.answered:
                _kill(child.pid, int(line[4:]))

    def _answer(self, child: _Child, status: int) -> None:
        if child.answered:
            return
        child.answered = True
        if child.client is not None:
            try:
                child.client.sendall(f"rc {status}\n".encode())
            except OSError:
                pass
            self._drop_client(child)

    def _drop_client(self, child: _Child) -> None:
        if child.client is not None:
            self._forget(child.client)
            child.client = None

    def _forget(self, sock: socket.socket) -> None:
        if sock.fileno() != -1:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(sock)
            sock.close()

    def _reap(self, wait: float = 0.0) -> None:
        deadline = time.monotonic() + wait
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.05)
                continue
            child = self.children.pop(pid, None)
            if child is None:
                continue
            # What it said before it died (a command taken, its status) comes first.
            while child.control.fileno() != -1 and _readable(child.control):
                self._from_child(child)
            code = os.waitstatus_to_exitcode(status)
            self._answer(child, code if code >= 0 else 128 - code)
            self._forget(child.control)
            if self.ready is child:
                self._ready_died(code)

    def _ready_died(self, code: int) -> None:
        """A ready process died before taking a command (the engine down?): another after a
        back-off, or the runner stops when its engine is gone."""

        self.ready = None
        self.not_before = time.monotonic() + self.backoff
        self.backoff = min(self.backoff * 2, RESTART_BACKOFF_MOST_SECONDS)
        if self.stopping:
            return
        if not address_answers(self.url):
            print(f"[runner] the engine at {self.url} is gone; stopping", flush=True)
            self.stopping = True
            return
        print(f"[runner] a ready process exited ({code}); starting another", flush=True)


def _readable(sock: socket.socket) -> bool:
    with selectors.DefaultSelector() as probe:
        probe.register(sock, selectors.EVENT_READ)
        return bool(probe.select(timeout=0))


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


# What every job's process imports: done once in the runner, shared by every fork.
PRELOADED = (
    "pyspark.sql.connect.session",
    "pyspark.sql.connect.functions",
    "streamshift.engine.jobs.execute",
)


def _preload() -> None:
    import importlib

    for module in PRELOADED:
        importlib.import_module(module)

    for name in flow_names():
        get_flow(name)


def _child_main(
    listener: socket.socket, control: socket.socket, url: str, parent: int
) -> None:  # pragma: no cover - runs in the forked process
    status = 0
    try:
        signal.set_wakeup_fd(-1)
        for s in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        status = _serve_one(listener, control, url, parent)
    except BaseException:  # noqa: BLE001 - the process ends here whatever happened
        traceback.print_exc()
        status = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _serve_one(listener: socket.socket, control: socket.socket, url: str, parent: int) -> int:
    from streamshift.engine.spark import connect_session

    if not address_answers(url):  # the engine is gone: the runner stops (Runner._reap)
        return 1
    spark = connect_session(url)
    spark.conf.get("spark.sql.session.timeZone")  # the session opened on the engine
    control.send(b"ready")
    # Waiting may take hours (until the next command); the engine closes a session idle for
    # long, so the ready one speaks to it every few minutes.
    listener.settimeout(KEEPALIVE_SECONDS)
    while True:
        try:
            conn, _ = listener.accept()
            break
        except TimeoutError:
            spark.conf.get("spark.sql.session.timeZone")
    listener.close()
    if os.getppid() != parent:  # the runner is gone: let the command run the job itself
        conn.close()
        return 0
    header = _receive(conn)
    if header is None:  # the command gave up waiting
        conn.close()
        return 0
    data, (out, err) = header
    socket.send_fds(control, [b"taken"], [conn.fileno()])
    conn.sendall(b"ok\n")
    conn.close()
    # The command's environment and folder; the Connect client's marks stay.
    marks = {k: os.environ[k] for k in CONNECT_CLIENT_VARIABLES if k in os.environ}
    os.environ.clear()
    os.environ.update(data["env"])
    os.environ.update(marks)
    os.chdir(data["cwd"])
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)

    from streamshift.engine.jobs.execute import run_handed_over
    from streamshift.engine.write.commits import reset_faults, tables_written
    from streamshift.engine.write.target import warm_state

    reset_faults()  # read from the command's environment, as its own process would
    if forget_stale():  # the flow code on disk, never the code the runner started with
        print(
            "[streamshift] the flows changed since the engine started: loaded again",
            file=sys.stderr,
        )
    status = run_handed_over(JobRequest.from_json(data["request"]))
    sys.stdout.flush()
    sys.stderr.flush()
    control.send(f"rc:{status}".encode())
    # The command has its answer: its output is closed, and the engine warms what was written.
    os.dup2(null, 1)
    os.dup2(null, 2)
    # After a job that did not end well (interrupted, refused) the process just exits.
    if status == 0:  # until the runner says another job has started
        warm_state(spark, tables_written(), stop=lambda: _readable(control))
    spark.stop()
    return status


def _receive(conn: socket.socket) -> tuple[dict, tuple[int, int]] | None:
    conn.settimeout(HAND_OVER_SECONDS)
    try:
        first, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 2)
        if len(fds) != 2 or len(first) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack(first[: _HEADER.size])
        body = first[_HEADER.size :]
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                return None
            body += chunk
    except OSError:
        return None
    conn.settimeout(None)
    return json.loads(body), (fds[0], fds[1])


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m streamshift.local.runner",
        description="The local engine's job runner (started and stopped with the engine).",
    )
    parser.add_argument("url", help="the engine's Spark Connect URL, sc://127.0.0.1:<port>")
    args = parser.parse_args(argv)
    _host, port = engine_address(args.url)
    Runner(args.url, socket_path(port)).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())

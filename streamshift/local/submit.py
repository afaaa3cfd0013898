"""Where a command's job runs: checked first without a JVM (:func:`streamshift.control.jobs.
check`), then on the warm engine when it is up — in a process its job runner made ready, when
one answers (:mod:`streamshift.local.runner`) — unless the job needs a JVM of its own; else in
the command's own process."""

from __future__ import annotations

from streamshift.control.jobs import check
from streamshift.local.runner import hand_over
from streamshift.spec.requests import JobRequest
from streamshift.spec.settings import load_settings
from streamshift.store.endpoints import active_profile, engine_answers


def submit(request: JobRequest) -> int:
    """Check ``request``, run it, print what it did; its exit status."""
    settings = load_settings()
    check(settings, request)
    # A spark-submit driver runs its job in its own session, never on the engine.
    on_engine = not request.needs_jvm and active_profile() == "local"
    if on_engine and engine_answers(settings):
        assert settings.engine is not None  # (it answers)
        status = hand_over(request, settings.engine)
        if status is not None:
            return status
    from streamshift.engine.jobs.execute import run_here

    return run_here(request)

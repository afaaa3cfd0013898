"""JVM-free decisions and views: the promotion gate (``stages``), what readers are served per
stage (``serving``), whether a date may close (``cutoff``), the daily report, and the answers
to "where's my adjustment?" (``trace``, ``explain``). Reads through ``store``; recording a
decision is the engine's (``engine.jobs.promote``)."""

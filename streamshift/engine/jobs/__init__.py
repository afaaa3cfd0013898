"""Jobs: one function per job, returning a result with ``describe()``; the request-style ones
are reached through :func:`streamshift.engine.jobs.requests.run` with a typed request. The CLI,
``spark_jobs/run.py``, ``streaming/``, the Airflow DAGs and the demo call these and add only
their own presentation."""

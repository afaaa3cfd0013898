"""Jobs: one function per job, taking settings and arguments and returning a result with
``describe()``. The CLI, ``spark_jobs/``, ``streaming/``, the Airflow DAGs and the demo call
these and add only their own presentation."""

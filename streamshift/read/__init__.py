"""JVM-free reads of the Delta tables (the ``deltalake`` package): for DAG tasks, the Airflow
plugin and read-only commands, which must answer in about the time Python starts."""

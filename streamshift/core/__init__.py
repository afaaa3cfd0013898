"""The Spark-free core: flow spec, registry, settings, errors, the raw-row contract, the
catalog of table paths, stream status files. Importing anything here never imports pyspark,
delta or great_expectations, so DAG parsing, the Airflow plugin and read commands stay light
(``tests/test_boundaries.py`` checks it)."""

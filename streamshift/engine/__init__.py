"""Everything that needs a SparkSession: the session builder (``spark``), the Spark readers
(``eodread``, ``decode``), the one write path (``write``), reconciliation (``compare``,
``recon``), data-quality validation (``validate``) and the jobs (``jobs``: ``run(spark,
request)``). Nothing in ``spec``, ``store`` or ``control`` imports it; the entry layers
(``airflow``, ``cli``, ``local``) reach it only inside the function that runs a job."""

"""The Airflow layer's logic: DAG factories (``dags``), what their Python tasks do (``tasks``,
``supervise``). Spark-free at import; Spark work is submitted with ``spark-submit``."""

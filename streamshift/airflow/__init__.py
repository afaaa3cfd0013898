"""The Airflow layer: DAG factories (``dags``), what their Python tasks decide (``tasks``,
``supervise``, ``waiting``, ``approval``), the engine tasks' operator and the Migration page's
app. Spark-free at import; Spark work runs on the engine, reached inside the task."""

"""The example project's Airflow DAGs, built by the kit's factory from the flow registry.

One ``eod_<flow>``, one ``late_data_<flow>`` and one ``maintenance_<flow>`` DAG per flow of the
project, one ``stream_supervisor``, one ``streamshift_promote`` (the Migration page's
promotions) and one ``streamshift_redrive`` (the quarantine re-driven once a cause is fixed).
Parsing imports ``airflow.sdk``, ``pendulum`` and the Spark-free core only
(``tests/test_boundaries.py`` checks it); the factories are in ``streamshift/airflow/dags.py``.
"""

from __future__ import annotations

from streamshift.airflow.dags import build_dags

globals().update(build_dags(__file__))

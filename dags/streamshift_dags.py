"""streamshift's Airflow DAGs, built from the flow registry.

One ``eod_<flow>``, one ``late_data_<flow>`` and one ``maintenance_<flow>`` DAG per flow in
``flows/``, one
``stream_supervisor``, one ``streamshift_promote`` (the Migration page's promotions) and one
``streamshift_redrive`` (the quarantine re-driven once a cause is fixed).
Parsing imports ``airflow.sdk``, ``pendulum`` and the Spark-free core only (``tests/test_boundaries.py`` checks it); the factories are in
``streamshift/airflow/dags.py``.
"""

from __future__ import annotations

from streamshift.airflow.dags import (
    eod_dag,
    late_data_dag,
    maintenance_dag,
    promote_dag,
    redrive_dag,
    stream_supervisor_dag,
)
from streamshift.spec.registry import flow_names

for _flow in flow_names():
    globals()[f"eod_{_flow}"] = eod_dag(_flow)
    globals()[f"late_data_{_flow}"] = late_data_dag(_flow)
    globals()[f"maintenance_{_flow}"] = maintenance_dag(_flow)

stream_supervisor = stream_supervisor_dag()
streamshift_promote = promote_dag(flow_names())
streamshift_redrive = redrive_dag(flow_names())

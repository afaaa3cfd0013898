"""The streamshift Airflow plugin: the Migration page in the Airflow UI's navigation.

Thin on purpose: the app and its data live in ``streamshift/airflow/migration.py``. Airflow loads
it through the ``airflow.plugins`` entry point (``pyproject.toml``), or from a plugins folder
(``plugins/streamshift_migration.py``).
Importing this file (the API server does, at start) loads neither pyspark nor a JVM;
``tests/test_boundaries.py`` checks it.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from streamshift.airflow.migration import create_app


class StreamshiftPlugin(AirflowPlugin):
    name = "streamshift"
    fastapi_apps: list[dict[str, Any]] = [  # noqa: RUF012 - as AirflowPlugin declares it
        {"app": create_app(), "url_prefix": "/streamshift", "name": "streamshift Migration"}
    ]
    external_views: list[dict[str, Any]] = [  # noqa: RUF012 - as AirflowPlugin declares it
        {
            "name": "Migration",
            "href": "streamshift/migration",
            "destination": "nav",
            "url_route": "migration",
            "category": "browse",
        }
    ]

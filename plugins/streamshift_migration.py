"""The streamshift Airflow plugin for a plugins-folder deployment (docker-compose.yml).

An installed kit registers the same plugin through the ``airflow.plugins`` entry point, which is
how ``streamshift airflow up`` loads it (its plugins folder is empty): one Airflow loads it one
way or the other, never both (Airflow records a second plugin of one name as an import error).
"""

from __future__ import annotations

from streamshift.airflow.plugin import StreamshiftPlugin

__all__ = ["StreamshiftPlugin"]

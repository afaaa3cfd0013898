# One image for every streamshift service of docker-compose.yml: the Spark master and workers,
# the Airflow components and the one-shot init. Built from the lock file by the project's own
# set-up, so the driver (Airflow's spark-submit), the executors and the tests all run the same
# Python packages, the same Spark and the same connector/Delta jars.
FROM python:3.11.14-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven npm procps tini \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# Dependencies first (requirements.lock, the jar poms), so code changes rebuild only the last layer.
COPY pyproject.toml requirements.lock ./
COPY scripts/ scripts/
COPY jvm/ jvm/
COPY expectations/assets/package.json expectations/assets/package-lock.json expectations/assets/
COPY streamshift/__init__.py streamshift/__init__.py
COPY flows/__init__.py flows/__init__.py
RUN STREAMSHIFT_PYTHON=/usr/local/bin/python3.11 scripts/setup
COPY . .
RUN .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .

ENV PATH=/app/.venv/bin:$PATH \
    PYSPARK_PYTHON=/app/.venv/bin/python \
    STREAMSHIFT_HOME=/data \
    AIRFLOW_HOME=/data/airflow
ENTRYPOINT ["/usr/bin/tini", "--"]

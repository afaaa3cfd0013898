# One image for every streamshift service of docker-compose.yml: the Spark master and workers,
# the Airflow components and the one-shot init. Built from the lock file by the project's own
# set-up, so the driver (Airflow's spark-submit), the executors and the tests all run the same
# Python packages, the same Spark and the same connector/Delta jars.
FROM python:3.11.14-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless npm procps tini \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# Dependencies first (requirements.lock, the kit with its jar lock), so a flow's change rebuilds
# only the last layer. The jars and the decoder go to /opt/streamshift/jars, the class archive
# into the image's virtualenv.
ENV STREAMSHIFT_JARS_DIR=/opt/streamshift/jars
COPY pyproject.toml requirements.lock setup.py ./
COPY scripts/ scripts/
COPY jvm/ jvm/
COPY expectations/assets/package.json expectations/assets/package-lock.json expectations/assets/
COPY streamshift/ streamshift/
RUN STREAMSHIFT_PYTHON=/usr/local/bin/python3.11 scripts/setup
COPY . .
RUN .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .

ENV PATH=/app/.venv/bin:$PATH \
    PYSPARK_PYTHON=/app/.venv/bin/python \
    STREAMSHIFT_HOME=/data \
    AIRFLOW_HOME=/data/airflow
ENTRYPOINT ["/usr/bin/tini", "--"]

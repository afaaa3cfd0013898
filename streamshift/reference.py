"""Loading a flow's reference data (the small CSVs it ships)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from streamshift.flow import Flow


def load_reference(spark: SparkSession, flow: Flow) -> dict[str, DataFrame]:
    """Each reference table of ``flow`` as a cached DataFrame, read with its declared schema."""
    tables: dict[str, DataFrame] = {}
    for ref in flow.reference:
        df = spark.read.csv(str(ref.path), header=True, schema=ref.schema, mode="FAILFAST")
        tables[ref.name] = df.cache()
    return tables

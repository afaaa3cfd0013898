"""Pure spec, no pyspark at import: the flow spec and registry, settings, errors, the raw-row
contract, the catalog of every table's path and fixed schema, the stage table, typed job
requests, the one SQL literal encoder. Imports nothing else of the package."""

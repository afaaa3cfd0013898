"""JVM-free IO: Delta tables read through deltalake (``tables``, the control ``records``, the
``quarantine``), stream heartbeats and process records, EOD file checks, the Kafka codec,
clients and producer, the data-quality project's files and results. Imports only ``spec``."""

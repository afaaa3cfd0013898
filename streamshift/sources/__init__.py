"""Where changes come from: EOD files (pure checks in ``eodfile``, the Spark reader in
``eodread``), Kafka events (``events`` codec, ``decode`` for Spark, ``kafka`` clients,
``produce``)."""

"""The one write path: pure transforms (``transforms``), the tables it writes (``target``) and
``apply_changes`` (``apply``), shared by EOD batch, streaming, replay and corrections."""

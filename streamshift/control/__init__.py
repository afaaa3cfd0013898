"""Control of the migration: reconciliation (``compare`` is pure, ``recon`` records), stages
and the promotion gate, the serving read, the daily report."""

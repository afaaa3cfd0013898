"""Data quality: Great Expectations 1.x suites per dataset (see ``project`` and ``validate``)."""

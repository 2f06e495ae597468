"""Fixtures of the spark_ops tests (the session-wide `spark` and `s3_server` come from tests/conftest.py)."""
from __future__ import annotations

import pytest


@pytest.fixture
def utc_spark(spark):
    """The shared session with a UTC session time zone (event times and the models' ms agree)."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


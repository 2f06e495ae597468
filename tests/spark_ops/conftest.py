"""Fixtures of the spark_ops tests (the session-wide `spark` and `s3_server` come from tests/conftest.py)."""
from __future__ import annotations

import contextlib

import pytest


@contextlib.contextmanager
def session_time_zone(spark, zone: str):
    """The shared session with ``spark.sql.session.timeZone`` set to ``zone`` for a while."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        yield spark
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


@pytest.fixture
def utc_spark(spark):
    """The shared session with a UTC session time zone (event times and the models' ms agree)."""
    with session_time_zone(spark, "UTC"):
        yield spark


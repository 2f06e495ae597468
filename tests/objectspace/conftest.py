"""Fixtures of the objectspace tests: a db (real dkv when importable, else the stand-in),
a recording proxy over it, and spaces on both."""
from __future__ import annotations

import pytest

from objectspace import ObjectSpace
from .os_helpers import RecordingDB, new_location, open_db

PREFIX = b"app/"


@pytest.fixture
def location(tmp_path) -> str:
    return new_location("memory", tmp_path)


@pytest.fixture
def db(location):
    d = open_db(location)
    yield d
    d.close()


@pytest.fixture
def space(db) -> ObjectSpace:
    return ObjectSpace(db, prefix=PREFIX)


@pytest.fixture
def rec(db) -> RecordingDB:
    return RecordingDB(db)


@pytest.fixture
def rspace(rec) -> ObjectSpace:
    """A space over the recording proxy (``rec.log`` holds what reached the store)."""
    return ObjectSpace(rec, prefix=PREFIX)


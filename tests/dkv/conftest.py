"""Fixtures shared by the dkv tests: fresh stores of each kind and the small engine options."""
from __future__ import annotations

import pytest

from dkv.storage import LocalDirStore, MemoryStore, open_store
from .dkv_helpers import SMALL


@pytest.fixture
def small() -> dict:
    """Engine options that force flushes and compactions after a few KiB (a fresh copy)."""
    return dict(SMALL)


@pytest.fixture
def mem() -> MemoryStore:
    """A fresh unnamed MemoryStore (pass the object itself as the dkv location)."""
    return MemoryStore()


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def any_store(request, tmp_path):
    """The same test on a MemoryStore, a LocalDirStore in tmp_path and S3 (moto server)."""
    if request.param == "memory":
        return MemoryStore()
    if request.param == "local":
        return LocalDirStore(str(tmp_path / "db"), fsync=False)
    s3 = request.getfixturevalue("s3_server")
    return open_store(s3.url(), cache_dir=str(tmp_path / "cache"))

"""Object names (dkv/_paths.py): one module builds and parses every name."""
from __future__ import annotations

import pytest

from dkv import _paths


def test_names_are_pinned():
    assert _paths.manifest_name("", 42, 7) == "manifest/00000000000000000042-0000000007.manifest"
    assert _paths.manifest_name("shard-1", 1, 2) == "shard-1/manifest/00000000000000000001-0000000002.manifest"
    assert _paths.claim_name("a", 3) == "a/writer/0000000003"
    assert _paths.wal_name("", 1, 5) == "wal/0000000001-000000000005.wal"
    assert _paths.sst_name("x/y", 12, 345) == "x/y/sst/0000000012-000000000345.sst"
    assert _paths.retired_name("a") == "a/retired"
    assert _paths.ns_prefix("/a/") == "a/"


def test_round_trips():
    assert _paths.parse_manifest_name(_paths.manifest_name("ns", 99, 3)) == (99, 3)
    assert _paths.parse_claim_name(_paths.claim_name("ns", 17)) == 17
    assert _paths.parse_file_name(_paths.wal_name("ns", 4, 8)) == ("wal", 4, 8)
    assert _paths.parse_file_name(_paths.sst_name("", 4, 9)) == ("sst", 4, 9)
    assert _paths.owner_ns(_paths.sst_name("a/b", 1, 1)) == "a/b"
    assert _paths.owner_ns(_paths.wal_name("", 1, 1)) == ""
    for bad in ("manifest/x.manifest", "manifest/1-2.txt", "manifest/1-2-3.manifest"):
        assert _paths.parse_manifest_name(bad) is None
    assert _paths.parse_file_name("sst/abc.sst") is None and _paths.parse_file_name("x.txt") is None
    assert _paths.parse_claim_name("writer/abc") is None


def test_listing_order_is_numeric_order():
    names = [_paths.manifest_name("", e, w) for e, w in [(1, 1), (2, 1), (10, 1), (10, 2), (100, 1), (10**12, 3)]]
    assert sorted(names) == names
    ssts = [_paths.sst_name("", w, t) for w, t in [(1, 9), (1, 10), (2, 1)]]
    assert sorted(ssts) == ssts


@pytest.mark.parametrize("bad", ["a/../b", "..", "a//b", "./a"])
def test_bad_instance_names(bad):
    with pytest.raises(ValueError):
        _paths.ns_prefix(bad)

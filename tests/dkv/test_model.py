"""The reference model: dkv against a dict, through random operation sequences.

Puts, deletes, batches, reads and scans run against both; checkpoints snapshot the dict;
a clean reopen, a crash (the process dies: nothing more reaches storage) and a rewind to
an older checkpoint must all give back exactly the snapshot of the checkpoint the store
opens at, and that checkpoint must be the newest completed one (or the one rewound to).
See dkv_helpers.Harness for the rules.
"""
from __future__ import annotations

import logging
import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from dkv.storage import LocalDirStore, MemoryStore, open_store
from .dkv_helpers import SPECIAL_KEYS, Harness, run_random


@pytest.fixture(autouse=True)
def _quiet_killed_sessions(caplog):
    # A crash kills storage access under the abandoned DB's threads; they log errors.
    caplog.set_level(logging.CRITICAL, logger="dkv")


# -- hypothesis stateful ------------------------------------------------------------------

keys = st.one_of(st.integers(0, 40).map(lambda i: b"k%03d" % i), st.sampled_from(SPECIAL_KEYS))
values = st.one_of(st.just(b""), st.binary(min_size=1, max_size=24), st.binary(min_size=200, max_size=400))


class DkvMachine(RuleBasedStateMachine):
    """Shrinkable twin of the seeded runs (MemoryStore, synchronous flushes)."""

    @initialize(retain=st.integers(1, 4), max_replay=st.sampled_from([0, 0, 1500]))
    def start(self, retain, max_replay):
        self.h = Harness(MemoryStore(), retain=retain, background=False, max_replay_bytes=max_replay)

    @rule(key=keys, value=values)
    def put(self, key, value):
        self.h.put(key, value)

    @rule(key=keys)
    def delete(self, key):
        self.h.delete(key)

    @rule(ops=st.lists(st.tuples(keys, st.one_of(st.none(), values)), min_size=1, max_size=6))
    def batch(self, ops):
        self.h.batch(ops)

    @rule(key=keys)
    def get(self, key):
        self.h.check_get(key)

    @rule(a=st.one_of(st.none(), keys), b=st.one_of(st.none(), keys))
    def scan(self, a, b):
        self.h.check_scan(a, b)

    @rule(prefix=st.sampled_from([b"k", b"k0", b"k01", b"k02", b"\x00", b"\xff", b"\xff\xff"]))
    def scan_prefix(self, prefix):
        self.h.check_prefix(prefix)

    @rule(wait=st.booleans(), flush=st.sampled_from([None, False, True]))
    def checkpoint(self, wait, flush):
        self.h.checkpoint(wait, flush)

    @rule()
    def reopen(self):
        self.h.reopen()

    @rule()
    def crash(self):
        self.h.crash()

    @rule(data=st.data())
    def reopen_at_older(self, data):
        self.h.reopen_at(lambda cps: data.draw(st.sampled_from(cps)))

    @rule(data=st.data())
    def inspect_read_only(self, data):
        cps = self.h.retained()
        if cps:
            self.h.inspect(data.draw(st.sampled_from(cps)))

    @rule(full=st.booleans())
    def compact(self, full):
        self.h.db.compact(full=full)

    @rule()
    def flush(self):
        self.h.db.flush()

    @invariant()
    def same_size(self):
        if hasattr(self, "h"):
            assert sum(1 for _ in self.h.db.scan()) == len(self.h.model)

    def teardown(self):
        if hasattr(self, "h"):
            self.h.check_all()
            self.h.close()


DkvMachine.TestCase.settings = settings(max_examples=75, stateful_step_count=50, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
test_stateful_memory = DkvMachine.TestCase


@pytest.mark.slow
def test_stateful_memory_long():
    from hypothesis.stateful import run_state_machine_as_test
    run_state_machine_as_test(DkvMachine, settings=settings(
        max_examples=300, stateful_step_count=120, deadline=None, suppress_health_check=list(HealthCheck)))


# -- seeded runs --------------------------------------------------------------------------

@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
@pytest.mark.parametrize("seed", range(6))
def test_random_memory(seed, background):
    h = Harness(MemoryStore(), retain=3, background=background, max_replay_bytes=(0, 3000)[seed % 2])
    run_random(h, random.Random(seed), 1500)
    h.close()


@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
@pytest.mark.parametrize("seed", range(2))
def test_random_local_dir(tmp_path, seed, background):
    h = Harness(LocalDirStore(str(tmp_path / "db"), fsync=False), retain=2, background=background)
    run_random(h, random.Random(100 + seed), 800)
    h.close()


def test_random_local_dir_with_fsync(tmp_path):
    h = Harness(LocalDirStore(str(tmp_path / "db")), retain=2, background=True)
    run_random(h, random.Random(7), 300)
    h.close()


@pytest.mark.parametrize("retain", [1, 5])
def test_random_retention_extremes(retain):
    h = Harness(MemoryStore(), retain=retain, background=True)
    run_random(h, random.Random(50 + retain), 1200)
    h.close()


@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
def test_random_replay_free_checkpoints(background):
    """max_replay_bytes: checkpoints flush big memtables first and reference SSTs, not WAL."""
    h = Harness(MemoryStore(), retain=3, background=background, max_replay_bytes=1500)
    run_random(h, random.Random(21), 1500)
    h.close()


@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
@pytest.mark.parametrize("seed", range(4))
def test_random_inline_segments_named_in_their_carriers(seed, background):
    """RFC 0007 and 0011: small segments inline in the manifest of their checkpoint, later
    manifests naming that manifest; retained windows that keep carriers past retention,
    flushes by the inline count, crashes, rewinds and read-only opens in between."""
    h = Harness(MemoryStore(), retain=(1, 2, 3, 5)[seed], background=background, inline_segment_bytes=4096,
                flush_inline_segments=(4, 12)[seed % 2], max_replay_bytes=(0, 6000)[seed // 2 % 2])
    run_random(h, random.Random(300 + seed), 1500)
    h.close()


@pytest.mark.slow
@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
@pytest.mark.parametrize("seed", range(3000, 3012))
def test_random_inline_segments_long(seed, background):
    h = Harness(MemoryStore(), retain=1 + seed % 4, background=background, inline_segment_bytes=4096,
                flush_inline_segments=(3, 16, 64)[seed % 3], max_replay_bytes=(0, 6000)[seed % 2])
    run_random(h, random.Random(seed), 4000)
    h.close()


def test_random_small_key_space_many_overwrites():
    """Ten keys overwritten thousands of times: shadowed versions at every level."""
    h = Harness(MemoryStore(), retain=2, background=True)
    run_random(h, random.Random(3), 2000, space=10)
    h.close()


@pytest.mark.s3
def test_random_s3(s3_server, tmp_path):
    store = open_store(s3_server.url(), cache_dir=str(tmp_path / "cache"))
    h = Harness(store, retain=2, background=True)
    run_random(h, random.Random(11), 250)
    h.close()


@pytest.mark.slow
@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
@pytest.mark.parametrize("seed", range(1000, 1030))
def test_random_memory_long(seed, background):
    h = Harness(MemoryStore(), retain=1 + seed % 4, background=background,
                max_replay_bytes=(0, 1500, 6000)[seed % 3])
    run_random(h, random.Random(seed), 4000)
    h.close()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_random_local_dir_long(tmp_path, seed):
    h = Harness(LocalDirStore(str(tmp_path / "db"), fsync=False), retain=3, background=True)
    run_random(h, random.Random(2000 + seed), 3000)
    h.close()


@pytest.mark.slow
@pytest.mark.s3
def test_random_s3_long(s3_server, tmp_path):
    store = open_store(s3_server.url(), cache_dir=str(tmp_path / "cache"))
    h = Harness(store, retain=3, background=True)
    run_random(h, random.Random(12), 1500)
    h.close()

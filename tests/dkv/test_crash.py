"""Crash at every point: replay each prefix of a run's storage mutations and recover.

A Journal records every put, conditional create and delete in the order they became
durable. The state after the first n of them is what a crash at that point leaves. For
every n: each manifest present references only objects that are present (WAL segments
and SSTs before the manifest; manifests deleted before their files), and the store
opens at the newest manifest present with exactly that checkpoint's contents.
"""
from __future__ import annotations

import random

import pytest

import dkv
from dkv import _paths
from .dkv_helpers import SMALL, Journal, contents, data_files, manifest_files, manifests, random_key, random_value, read_manifest


def _run(journal, seed: int, background: bool, rounds: int = 8) -> dict:
    rng = random.Random(seed)
    model, snaps = {}, {}
    db = dkv.open(journal, retain=2, background=background, **SMALL)
    cps = []
    for epoch in range(1, rounds + 1):
        for _ in range(70):
            key = random_key(rng, 60)
            if rng.random() < 0.8:
                value = random_value(rng)
                db.put(key, value)
                model[key] = value
            else:
                db.delete(key)
                model.pop(key, None)
        cps.append(db.checkpoint(epoch, flush=epoch % 4 == 1))
        snaps[epoch] = dict(model)
        if rng.random() < 0.5:
            cps[-1].wait()
        if epoch % 3 == 0:
            db.compact(full=epoch % 2 == 0)
    for cp in cps:
        cp.wait()
    db.close()
    return snaps


@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
@pytest.mark.parametrize("seed", [1, 2])
def test_every_crash_point_recovers_the_newest_manifest_present(seed, background):
    journal = Journal()
    snaps = _run(journal, seed=seed, background=background, rounds=10)
    assert any(kind == "delete" for kind, _, _ in journal.log), "the run should collect garbage"
    for n in range(len(journal.log) + 1):
        store = journal.replay(n)
        present = data_files(store)
        epochs = []
        for name in manifests(store):
            missing = manifest_files(read_manifest(store, name)) - present
            assert not missing, f"after {n} mutations {name} references missing {sorted(missing)}"
            epochs.append(_paths.parse_manifest_name(name)[0])
        if n == 0:          # nothing written yet: no store to read (a read-only open creates none)
            with pytest.raises(dkv.NotAStoreError):
                dkv.open(store, read_only=True, **SMALL)
            continue
        with dkv.open(store, read_only=True, **SMALL) as db:
            cps = [c.epoch for c in db.checkpoints()]
            # A crash between a manifest and the garbage collection after it leaves the
            # manifest that left retention: no checkpoint any more (the newest's `k`, RFC 0011).
            if epochs:
                newest = read_manifest(store, max(manifests(store)))
                assert cps == [e for e in sorted(epochs) if e in newest.retained]
                assert len(cps) >= min(2, len(epochs)) and cps[-1] == max(epochs)
            else:
                assert cps == []
            assert contents(db) == (snaps[max(epochs)] if epochs else {}), f"crash after {n} mutations"


def test_a_writer_recovers_at_crash_points_and_goes_on():
    journal = Journal()
    snaps = _run(journal, seed=2, background=False, rounds=5)
    for n in range(0, len(journal.log) + 1, 3):
        store = journal.replay(n)
        epochs = [_paths.parse_manifest_name(m)[0] for m in manifests(store)]
        base = snaps[max(epochs)] if epochs else {}
        with dkv.open(store, retain=2, **SMALL) as db:
            assert contents(db) == base
            db.put(b"after-crash", b"%d" % n)
            db.checkpoint(100).wait()
        with dkv.open(store, read_only=True) as db:
            assert contents(db) == {**base, b"after-crash": b"%d" % n}

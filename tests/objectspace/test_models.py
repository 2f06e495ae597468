"""Reference-model tests, the backbone: every kind driven by seeded random operations next
to its builtin twin, with the save protocol, failed commits, checkpoints, reopens,
simulated crashes and delete/re-create interleaved.

After every committed save a *second* space is opened on the same db and must see the
twin's state: the store alone holds it. After a crash the db is reopened at the last
completed checkpoint and the twin rolls back to its copy from that checkpoint.
"""
from __future__ import annotations

import random

import pytest

from dkv.batch import WriteBatch
from objectspace import ObjectSpace
from .os_drivers import DRIVERS
from .os_helpers import new_location, open_db

P = b"\x00\x07\x00op-1/"
NAMES = ["a", ("scope", 1)]
KEYTYPES = ["int", "str", "tuple"]


class Clock:
    now = 1_700_000_000_000


class Run:
    def __init__(self, kind: str, seed: int, location: str, cache_items: int, cache_bytes: int = 256 << 20) -> None:
        self.rng = random.Random(seed)
        self.clock = Clock()
        driver = DRIVERS[kind]
        self.driver = driver(KEYTYPES[seed % 3]) if kind in ("set", "sorted_set", "dict", "sorted_dict") else driver()
        self.driver.clock = self.clock
        self.location, self.cache_items, self.cache_bytes = location, cache_items, cache_bytes
        self.epoch = 0
        self.cp = None              # (epoch, models) of the last completed checkpoint
        self.stats = dict.fromkeys(["ops", "saves", "failed", "checkpoints", "reopens", "crashes", "recreates"], 0)
        self._open(None)
        self.objs, self.models = {}, {}
        for name in NAMES:
            self.objs[name], self.models[name] = self.driver.create(self.space, name, self.rng)

    def _space(self, db) -> ObjectSpace:
        return ObjectSpace(db, prefix=P, cache_items=self.cache_items, cache_bytes=self.cache_bytes,
                           clock=lambda: self.clock.now)

    def _open(self, checkpoint) -> None:
        self.db = open_db(self.location, checkpoint)
        self.space = self._space(self.db)

    def run(self, steps: int) -> dict:
        rng = self.rng
        for _ in range(steps):
            r = rng.random()
            if r < 0.05:
                self.save_ok()
            elif r < 0.07:
                self.save_failed()
            elif r < 0.09:
                self.checkpoint()
            elif r < 0.10:
                self.reopen()
            elif r < 0.11:
                self.crash()
            elif r < 0.115:
                self.recreate()
            else:
                name = rng.choice(NAMES)
                self.driver.step(rng, self.objs[name], self.models[name])
                self.stats["ops"] += 1
        self.reopen()
        self.db.close()
        return self.stats

    def check_all(self, space=None) -> None:
        for name in NAMES:
            obj = self.driver.get(space, name) if space is not None else self.objs[name]
            self.driver.check(obj, self.models[name])

    def save_ok(self) -> None:
        full = self.rng.random() < 0.15
        if self.rng.random() < 0.3:       # the host saves into its own batch
            batch = WriteBatch()
            batch.put(b"\xff-host", b"x")
            assert self.space.save(full=full, batch=batch) is batch
            assert next(iter(batch)) == (b"\xff-host", b"x")
        else:
            batch = self.space.save(full=full)
        self.db.write(batch)
        self.space.on_saved()
        self.stats["saves"] += 1
        fresh = self._space(self.db)
        assert sorted(map(repr, fresh.names())) == sorted(map(repr, NAMES))
        self.check_all(fresh)
        self.check_all()

    def save_failed(self) -> None:
        self.space.save(full=self.rng.random() < 0.15)    # the commit fails: never written, never confirmed
        self.stats["failed"] += 1

    def checkpoint(self) -> None:
        self.epoch += 1
        self.space.checkpoint(self.epoch, full=self.rng.random() < 0.1)
        self.cp = (self.epoch, {n: self.driver.copy(m) for n, m in self.models.items()})
        self.stats["checkpoints"] += 1

    def reopen(self) -> None:
        self.checkpoint()
        self.db.close()
        self._open(None)
        self.objs = {n: self.driver.get(self.space, n) for n in NAMES}
        self.check_all()
        self.stats["reopens"] += 1

    def crash(self) -> None:
        self.db.close()                   # what was not checkpointed is lost
        self.stats["crashes"] += 1
        if self.cp is None:
            self._open(None)
            assert self.space.names() == []
            for name in NAMES:
                self.objs[name], self.models[name] = self.driver.create(self.space, name, self.rng)
            return
        self._open(self.cp[0])
        self.models = {n: self.driver.copy(m) for n, m in self.cp[1].items()}
        self.objs = {n: self.driver.get(self.space, n) for n in NAMES}
        self.check_all()

    def recreate(self) -> None:
        name = self.rng.choice(NAMES)
        self.space.delete(name)
        assert name not in self.space
        self.objs[name], self.models[name] = self.driver.create(self.space, name, self.rng)
        self.stats["recreates"] += 1


KINDS = list(DRIVERS)


@pytest.mark.parametrize("cache_items, cache_bytes", [(4096, 256 << 20), (5, 256 << 20), (4096, 6000)],
                         ids=["cached", "tiny-cache", "tiny-budget"])
@pytest.mark.parametrize("kind", KINDS)
def test_reference_model(kind, cache_items, cache_bytes):
    """600 steps x 3 cache settings = 1,800 steps per kind in the default suite. The tiny
    budget (6,000 bytes) drops clean items and handles after nearly every save."""
    seed = 1 if cache_items > 5 else 2
    stats = Run(kind, seed, new_location(), cache_items, cache_bytes).run(600)
    assert stats["saves"] and stats["checkpoints"] and stats["crashes"] and stats["ops"] > 400


@pytest.mark.parametrize("kind", ["queue", "sorted_dict", "stream"])
def test_reference_model_on_a_folder(kind, tmp_path):
    stats = Run(kind, 7, new_location("dir", tmp_path), 5).run(300)
    assert stats["reopens"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 11))
@pytest.mark.parametrize("kind", KINDS)
def test_reference_model_long(kind, seed, tmp_path):
    where = "dir" if seed % 4 == 0 else "memory"
    Run(kind, seed, new_location(where, tmp_path), [4096, 5, 64][seed % 3],
        [256 << 20, 256 << 20, 20_000][seed % 3]).run(3000)

"""A tiny in-memory stand-in with dkv's public API (used only when ``dkv.open`` is absent).

A sorted dict plus checkpoint snapshots, so "reopen at checkpoint N" works:
``StandinDB.open(name, checkpoint=N)`` returns the state as of N and drops later ones.
"""
from __future__ import annotations

from contextlib import contextmanager

from sortedcontainers import SortedDict

from dkv.batch import WriteBatch, check_key, check_value

_STORES: dict[str, dict] = {}     # name -> {epoch: snapshot}


class _Checkpoint:
    def __init__(self, epoch: int, name: str) -> None:
        self.epoch, self.name = epoch, name

    def wait(self, timeout=None) -> str:
        return self.name


class StandinDB:
    def __init__(self, name: str, checkpoint: int | None = None) -> None:
        self.name = name
        cps = _STORES.setdefault(name, {})
        if checkpoint is None:
            checkpoint = max(cps) if cps else None
        elif checkpoint not in cps:
            raise LookupError(f"no checkpoint {checkpoint} in {name!r}")
        for e in [e for e in cps if checkpoint is None or e > checkpoint]:
            del cps[e]
        self._data = SortedDict(cps[checkpoint]) if checkpoint is not None else SortedDict()
        self._last_epoch = checkpoint if checkpoint is not None else -1
        self._closed = False

    @classmethod
    def open(cls, location: str, checkpoint: int | None = None) -> "StandinDB":
        return cls(location, checkpoint)

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("stand-in db is closed")

    def put(self, key: bytes, value: bytes) -> None:
        self._check()
        self._data[check_key(key)] = check_value(value)

    def delete(self, key: bytes) -> None:
        self._check()
        self._data.pop(check_key(key), None)

    def get(self, key: bytes):
        self._check()
        return self._data.get(check_key(key))

    def write(self, batch: WriteBatch) -> None:
        self._check()
        for k, v in batch:
            if v is None:
                self._data.pop(k, None)
            else:
                self._data[k] = v

    @contextmanager
    def batch(self):
        b = WriteBatch()
        yield b
        self.write(b)

    def scan(self, start=None, end=None):
        self._check()
        keys = list(self._data.irange(start, end, inclusive=(True, False)))
        for k in keys:
            v = self._data.get(k)
            if v is not None:
                yield k, v

    def scan_prefix(self, prefix: bytes):
        end = prefix.rstrip(b"\xff")
        end = end[:-1] + bytes((end[-1] + 1,)) if end else None
        return self.scan(prefix, end)

    def checkpoint(self, epoch: int) -> _Checkpoint:
        self._check()
        if epoch <= self._last_epoch:
            raise ValueError(f"epoch {epoch} must be greater than {self._last_epoch}")
        _STORES[self.name][epoch] = dict(self._data)
        self._last_epoch = epoch
        return _Checkpoint(epoch, f"manifest-{epoch}")

    def checkpoints(self) -> list:
        return [_Checkpoint(e, f"manifest-{e}") for e in sorted(_STORES[self.name])]

    def close(self) -> None:
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

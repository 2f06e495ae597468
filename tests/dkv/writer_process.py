"""A dkv writer as a process of its own, for tests of two writer processes on one store, run
from the root as ``python -m tests.dkv.writer_process <store> <name> <control folder> [seed]``.

It opens ``<store>`` as a writer, writes ``b"k%03d"`` keys with values naming it, and commits
a checkpoint after every few writes, printing ``committed <epoch>`` for each, until
``<control>/stop-<name>`` exists (then it closes and exits 0) or dkv fences it (then it
prints ``FENCED <error>`` and exits 3). At open it writes what it read into
``<control>/<name>.base.json`` and each checkpoint's contents into
``<control>/<name>.<epoch>.json`` (hex keys and values) before it waits for it; a checkpoint
that was fenced but stays in the store (the newer writer started from it) prints
``kept <epoch>`` before ``FENCED``."""
from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import dkv


def _dump(path: Path, model: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({k.hex(): v.hex() for k, v in model.items()}))
    os.replace(tmp, path)


def main() -> int:
    store, name, control = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    db = dkv.open(store, memtable_bytes=4000, table_bytes=4000, block_bytes=512, retain=100)
    model = dict(db.scan())
    _dump(control / f"{name}.base.json", model)
    print(f"opened at {db.last_checkpoint}", flush=True)
    i = 0
    try:
        while not (control / f"stop-{name}").exists():
            for _ in range(20):
                i += 1
                key = b"k%03d" % rng.randrange(300)
                if rng.random() < 0.85:
                    model[key] = f"{name}-{i}".encode()
                    db.put(key, model[key])
                else:
                    model.pop(key, None)
                    db.delete(key)
            cp = db.checkpoint()
            _dump(control / f"{name}.{cp.epoch}.json", model)     # what the checkpoint holds if it commits
            cp.wait()
            print(f"committed {cp.epoch}", flush=True)
            time.sleep(0.02)
    except dkv.FencedError as e:
        if e.checkpoint_kept:
            print(f"kept {cp.epoch}", flush=True)
        print(f"FENCED {e}", flush=True)
        try:
            db.close()
        except dkv.DkvError:
            pass
        return 3
    db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Checkpoint options: flush=True and wait_for_flushes make checkpoints that reference SSTs
instead of WAL segments (cheaper recovery, and no record uploaded twice)."""
import pytest

import dkv
from dkv.storage import LoggingStore, MemoryStore


def fill(db, model, n, start=0):
    for i in range(start, start + n):
        k, v = b"\x00\x01k%05d" % (i % 700), b"v%d" % i
        db.put(k, v)
        model[k] = v


@pytest.mark.parametrize("background", [False, True])
def test_wait_for_flushes_references_the_sst_and_uploads_no_wal_for_it(background):
    store = LoggingStore(MemoryStore())
    model = {}
    db = dkv.open(store, memtable_bytes=20_000, flush_segments=2, wait_for_flushes=True, background=background)
    fill(db, model, 120)                          # below the memtable size: WAL only
    db.checkpoint(1).wait()
    store.clear()
    fill(db, model, 400, start=120)               # seals the memtable mid-way: two segments, a flush
    cp = db.checkpoint(2)
    cp.wait()
    kinds = [c.kind + " " + c.key.split("/")[0] for c in store.calls if c.kind in ("put", "put_if_absent")]
    assert "put sst" in kinds
    with dkv.open(store.inner, read_only=True) as r:
        assert dict(r.scan()) == model
    # What the flush covered went out as an SST only: the WAL written holds just the rest.
    assert cp.records < 400
    db.close()


def test_without_the_option_the_checkpoint_does_not_wait():
    store = MemoryStore()
    model = {}
    db = dkv.open(store, memtable_bytes=20_000, background=False)
    fill(db, model, 520)
    db.checkpoint(1).wait()
    with dkv.open(store, read_only=True) as r:
        assert dict(r.scan()) == model
    db.close()


def test_wait_uploads_a_small_checkpoint_on_the_calling_thread():
    """cp.wait() right after a small checkpoint uploads it on the caller's thread (no
    hand-off); a large one, or a small one waited for later, is uploaded by the upload
    thread; all of them read back."""
    import threading
    store = LoggingStore(MemoryStore())
    model = {}
    db = dkv.open(store)
    uploaders = []
    real = db._upload

    def spy(cp, pin, **kw):
        uploaders.append(threading.current_thread() is threading.main_thread())
        real(cp, pin, **kw)
    db._upload = spy
    fill(db, model, 20)
    busy = threading.Event()
    db._uploader.submit(busy.wait)      # the upload thread is held up: the waiter gets there first
    db.checkpoint().wait()
    busy.set()
    assert uploaders == [True]
    big = {b"\x00\x01big%06d" % i: bytes(40) for i in range(3000)}     # > INLINE_BYTES of changes
    for k, v in big.items():
        db.put(k, v)
    model.update(big)
    db.checkpoint().wait()
    assert uploaders == [True, False]
    db.wait_idle()
    fill(db, model, 20, start=100)
    cp = db.checkpoint()
    db.wait_idle()                      # the upload thread gets there first
    assert cp.done() and cp.wait() and uploaders == [True, False, False]
    db.close()
    with dkv.open(store.inner, read_only=True) as r:
        assert dict(r.scan()) == model and r.last_checkpoint == 3


def test_checkpoints_waited_at_once_or_later_from_several_threads_commit_in_epoch_order():
    """Threads that wait for some checkpoints at once (uploaded on their own thread) and for
    others at the end: every checkpoint completes, the retained ones are consecutive, and
    each names the previous one as its parent (uploads never overtake each other)."""
    import threading
    from dkv.format import manifest as mf
    store = MemoryStore()
    db = dkv.open(store, retain=50)
    errors, cps = [], []
    lock = threading.Lock()

    def worker(t):
        try:
            for i in range(40):
                db.put(b"\x00\x01t%d-%03d" % (t, i % 7), b"v%d" % i)
                cp = db.checkpoint()
                if (i + t) % 2 == 0:
                    cp.wait()
                with lock:
                    cps.append(cp)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for cp in cps:
        cp.wait()
    db.wait_idle()
    infos = db.checkpoints()
    assert [i.epoch for i in infos] == list(range(71, 121))
    for prev, info in zip(infos, infos[1:]):
        assert mf.decode(store.get(info.name)).parent == prev.epoch
    db.close()

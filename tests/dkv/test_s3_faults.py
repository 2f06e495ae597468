"""S3Store against a misbehaving S3 endpoint: the fault proxy (s3_fault_proxy.py) between
boto3 and the moto server (issue 18). Each fault kind on each operation is either retried
and succeeds, or, when it persists, ends in a StorageError naming the operation, the key and
the last answer; then a dkv model run over the proxy at ~5% faults per request."""
from __future__ import annotations

import logging
import random
import re
import uuid

import pytest

from dkv.errors import StorageError
from dkv.storage import CachedStore, S3Store
from .dkv_helpers import Harness, run_random

pytestmark = pytest.mark.s3

ANSWER_FAULTS = ["503", "500", "429"]
CONN_FAULTS = ["reset_before", "reset_after", "delay"]
ALL = ANSWER_FAULTS + CONN_FAULTS + ["short_body"]


@pytest.fixture(autouse=True)
def _quiet(caplog):
    caplog.set_level(logging.CRITICAL, logger="dkv")
    caplog.set_level(logging.CRITICAL, logger="botocore")


def make_store(proxy, s3_server, attempts=4, prefix=None, read_timeout=0.5) -> S3Store:
    """A store through the proxy; the short read timeout lets a "delay" fault time out. A test
    that counts requests and injects no delay passes a long one, so that a slow answer on a
    loaded machine is not retried (and counted) as a timeout."""
    return S3Store(s3_server.bucket, prefix or "faults-" + uuid.uuid4().hex, endpoint_url=proxy.endpoint,
                   region_name="us-east-1", max_attempts=attempts, connect_timeout=1, read_timeout=read_timeout,
                   retry_delay=0.01)


@pytest.fixture
def proxy(s3_fault_proxy):
    s3_fault_proxy.delay_seconds = 1.0        # past the 0.5 s read timeout of make_store
    return s3_fault_proxy


def _ops(store):
    """Per request kind: (setup, the operation, check of its result)."""
    return {
        "GET": (lambda: store.put("a", b"x" * 5000), lambda: store.get("a"), lambda r: r == b"x" * 5000),
        "PUT": (lambda: None, lambda: store.put("a", b"hello"), lambda r: store.get("a") == b"hello"),
        "CPUT": (lambda: None, lambda: store.put_if_absent("m", b"mine"),
                 lambda r: r is True and store.get("m") == b"mine"),
        "HEAD": (lambda: store.put("a", b"abc"), lambda: store.size("a"), lambda r: r == 3),
        "LIST": (lambda: [store.put(f"l/{i}", b"1") for i in range(3)], lambda: store.list("l/"),
                 lambda r: [k for k, _ in r] == ["l/0", "l/1", "l/2"]),
        "DELETE": (lambda: store.put("a", b"1"), lambda: store.delete("a"), lambda r: store.size("a") is None),
        "POST": (lambda: [store.put(f"d/{i}", b"1") for i in range(3)],
                 lambda: store.delete_many([f"d/{i}" for i in range(3)]), lambda r: store.list("d/") == []),
    }


@pytest.mark.parametrize("fault", ALL)
@pytest.mark.parametrize("kind", ["GET", "PUT", "CPUT", "HEAD", "LIST", "DELETE", "POST"])
def test_a_fault_once_is_retried(proxy, s3_server, kind, fault):
    if fault == "short_body" and kind in ("HEAD",):
        pytest.skip("a HEAD answer has no body to cut")
    store = make_store(proxy, s3_server)
    setup, op, check = _ops(store)[kind]
    setup()
    proxy.force(kind, fault, fault)
    result = op()
    proxy.clear()
    assert check(result)
    assert proxy.faults(kind) == [fault, fault]


@pytest.mark.parametrize("fault", ALL)
@pytest.mark.parametrize("kind", [k if k in ("GET", "CPUT") else pytest.param(k, marks=pytest.mark.slow)
                                  for k in ["GET", "PUT", "CPUT", "HEAD", "LIST", "DELETE", "POST"]])
def test_a_fault_that_persists_is_a_storage_error(proxy, s3_server, kind, fault):
    if fault == "short_body" and kind == "HEAD":
        pytest.skip("a HEAD answer has no body to cut")
    if fault in ("reset_after", "short_body", "delay") and kind == "CPUT":
        pytest.skip("applied, answer lost, retried: the read-back rightly finds it ours "
                    "(test_put_if_absent_applied_then_connection_reset_knows_it_won)")
    store = make_store(proxy, s3_server, attempts=3)
    setup, op, check = _ops(store)[kind]
    setup()
    proxy.set_rates({kind: {fault: 1.0}})
    with pytest.raises(StorageError) as info:
        op()
    msg = str(info.value)
    proxy.clear()
    names = {"GET": "get", "PUT": "put", "CPUT": "put_if_absent", "HEAD": "head", "LIST": "list",
             "DELETE": "delete", "POST": "delete_many"}
    assert f"S3 {names[kind]} {store.location}/" in msg
    assert "last answer" in msg
    if fault in ANSWER_FAULTS:
        assert f"HTTP {fault}" in msg      # a HEAD answer has no body: its code is the status
        assert kind == "HEAD" or "SlowDown" in msg or "InternalError" in msg
    # the store is usable once the endpoint recovers
    setup()
    assert check(op()) or kind == "CPUT"


def test_a_short_body_is_never_returned(proxy, s3_server):
    store = make_store(proxy, s3_server, attempts=3)
    store.put("big", bytes(range(256)) * 100)
    proxy.set_rates({"GET": {"short_body": 1.0}})
    for args in [(), (0, 1000), (100, None), (25000, 30000)]:
        with pytest.raises(StorageError, match=r"S3 get .*/big .*short|S3 get .*/big .*IncompleteRead|"
                                               r"S3 get .*/big .*body read failed"):
            store.get("big", *args)
    proxy.clear()
    assert store.get("big", 25000, 30000) == (bytes(range(256)) * 100)[25000:]
    proxy.force("GET", "short_body")
    assert store.get("big", 10, 20) == bytes(range(10, 20))


def test_put_if_absent_applied_then_connection_reset_knows_it_won(proxy, s3_server):
    store = make_store(proxy, s3_server)
    proxy.force("CPUT", "reset_after")
    assert store.put_if_absent("MANIFEST-1", b"writer A") is True
    assert proxy.faults("CPUT") == ["reset_after"]
    # the retry got 412 (a slow answer on a loaded machine may add a timed-out attempt)
    assert [k for k, *_ in proxy.log].count("CPUT") >= 2
    # a real loser still loses, and the winner's object is untouched
    proxy.force("CPUT", "reset_after")
    assert store.put_if_absent("MANIFEST-1", b"writer B") is False
    assert store.get("MANIFEST-1") == b"writer A"
    # the same with an answer that never comes (read timeout)
    proxy.force("CPUT", "delay")
    assert store.put_if_absent("MANIFEST-2", b"writer A") is True


def test_delete_many_retries_the_keys_s3_reports_and_names_those_that_stay(proxy, s3_server):
    store = make_store(proxy, s3_server, attempts=3)
    for i in range(5):
        store.put(f"d/{i}", b"1")
    proxy.force("POST", "delete_errors")
    store.delete_many([f"d/{i}" for i in range(5)])
    assert store.list("d/") == []
    assert proxy.faults("POST") == ["delete_errors"]
    for i in range(3):
        store.put(f"e/{i}", b"1")
    proxy.set_rates({"POST": {"delete_errors": 1.0}})
    with pytest.raises(StorageError, match=r"delete_many .* 1 key\(s\) not deleted .*e/0.*InternalError"):
        store.delete_many([f"e/{i}" for i in range(3)])
    proxy.clear()
    assert [k for k, _ in store.list("e/")] == ["e/0"]


def test_list_retries_the_failed_page_not_the_listing(proxy, s3_server):
    store = make_store(proxy, s3_server, read_timeout=60)     # pages of 1,000 keys: slow under load
    client = s3_server.client()
    keys = [f"p/{i:05d}" for i in range(2100)]
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=s3_server.bucket, Key=store.prefix + k, Body=b""), keys))
    proxy.log.clear()
    proxy.force("LIST", None, None, "500")       # third page fails once
    assert [k for k, _ in store.list("p/")] == keys
    lists = [path for kind, _, path, _ in proxy.log if kind == "LIST"]
    assert len(lists) == 4
    assert "continuation-token" in lists[2] and lists[3] == lists[2]


def test_the_endpoint_down_then_up(proxy, s3_server):
    store = make_store(proxy, s3_server, attempts=2)
    store.put("a", b"1")
    proxy.down()
    with pytest.raises(StorageError, match=r"S3 get .*/a .*last answer"):
        store.get("a")
    proxy.up()
    assert store.get("a") == b"1"


def test_retries_are_counted(proxy, s3_server, tmp_path, monkeypatch):
    """botocore's retries (a request sent again) and our loop's rounds are counted per client
    and per process; with DKV_S3_RETRY_DIR the process's totals are written to a file."""
    import json
    import os

    from dkv.storage.s3 import retry_totals
    monkeypatch.setenv("DKV_S3_RETRY_DIR", str(tmp_path))
    store = make_store(proxy, s3_server)
    store.put("a", b"x" * 5000)
    for i in range(3):
        store.put(f"d/{i}", b"1")
    assert store.retries() == {"botocore": 0, "ours": 0}
    totals = retry_totals()
    proxy.force("GET", "503", "reset_before")         # botocore retries both
    assert store.get("a") == b"x" * 5000
    assert store.retries() == {"botocore": 2, "ours": 0}
    proxy.force("GET", "short_body")                  # the body read: our loop
    assert store.get("a") == b"x" * 5000
    assert store.retries() == {"botocore": 2, "ours": 1}
    proxy.force("POST", "delete_errors")              # a per-key error of DeleteObjects: our loop
    store.delete_many([f"d/{i}" for i in range(3)])
    proxy.force("PUT", "429")
    store.put("b", b"2")
    assert store.retries() == {"botocore": 3, "ours": 2}
    # every injected fault was retried once, and counted once
    assert len(proxy.faults()) == 5
    assert store.parent()[0].retries() == store.retries()          # the same client, the same counts
    now = retry_totals()
    assert {k: now[k] - totals[k] for k in now} == {"botocore": 3, "ours": 2}
    saved = json.loads((tmp_path / f"retries-{os.getpid()}.json").read_text())
    assert saved == now


# -- dkv's model over the faulty endpoint --------------------------------------------------

def _faulty_store(proxy, s3_server, tmp_path, name: str):
    inner = S3Store(s3_server.bucket, name + "-" + uuid.uuid4().hex, endpoint_url=proxy.endpoint,
                    region_name="us-east-1", max_attempts=10, connect_timeout=1, read_timeout=0.5,
                    retry_delay=0.01)
    return inner, CachedStore(inner, str(tmp_path / name), 1 << 30, cacheable=lambda key: key.endswith(".sst"),
                              range_read_cost=4096)     # tables bigger than their tail read are read by range first


def _model_run(proxy, s3_server, tmp_path, seed, steps, rate, rescale_steps=0):
    """dkv's random model (puts, deletes, batches, checkpoints, reopens, crashes, compactions),
    then random rescales (splits and merges of instances, test_rescale.run_rescales), over
    the proxy at ``rate`` faults per request. Returns the proxy's counts and the retries
    that the stores counted."""
    from .test_rescale import run_rescales
    inner, store = _faulty_store(proxy, s3_server, tmp_path, "model")
    proxy.rng.seed(seed)
    proxy.uniform(rate)
    h = Harness(store, retain=2, background=True)
    run_random(h, random.Random(seed), steps)
    h.close()
    retries = dict(inner.retries())
    if rescale_steps:
        inner2, root = _faulty_store(proxy, s3_server, tmp_path, "rescale")
        run_rescales(seed, rescale_steps, background=True, root=root)
        for k, v in inner2.retries().items():
            retries[k] = retries.get(k, 0) + v
    counts = proxy.counts()
    proxy.clear()
    counts["retries"] = retries
    return counts


def test_model_over_faulty_s3(proxy, s3_server, tmp_path):
    counts = _model_run(proxy, s3_server, tmp_path, seed=18, steps=120, rate=0.05, rescale_steps=20)
    print(f"\nfault proxy, seed 18: {counts}")
    assert counts["requests"] > 50 and counts["faults"]
    assert counts["retries"]["botocore"] + counts["retries"]["ours"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_model_over_faulty_s3_long(proxy, s3_server, tmp_path, seed):
    counts = _model_run(proxy, s3_server, tmp_path, seed=seed, steps=800, rate=0.05, rescale_steps=120)
    print(f"\nfault proxy, seed {seed}: {counts}")
    assert counts["faults"]


# -- retries run out during a checkpoint, then the endpoint recovers -----------------------

def _outage(proxy, how: str) -> None:
    if how == "down":
        proxy.down()                # every connection refused
    else:
        proxy.set_rates({"*": {how: 1.0}})


def _recover(proxy, how: str) -> None:
    proxy.up() if how == "down" else proxy.clear()


def _fill(db, model: dict, rng: random.Random, n: int) -> None:
    for _ in range(n):
        key = b"k%03d" % rng.randrange(200)
        if rng.random() < 0.85:
            model[key] = rng.randbytes(rng.randrange(1, 80))
            db.put(key, model[key])
        else:
            model.pop(key, None)
            db.delete(key)


def _checkpoint_through_an_outage(proxy, s3_server, tmp_path, how: str, opts: dict, expect: str) -> None:
    import dkv
    from .dkv_helpers import contents
    inner = make_store(proxy, s3_server, attempts=3)
    store = CachedStore(inner, str(tmp_path / "cache"), 1 << 30, cacheable=lambda key: key.endswith(".sst"))
    rng = random.Random(18)
    model, snaps = {}, {}
    db = dkv.open(store, retain=3, **opts)
    for epoch in (1, 2):
        _fill(db, model, rng, 150)
        db.checkpoint(epoch).wait()
        snaps[epoch] = dict(model)
    _fill(db, model, rng, 150)
    _outage(proxy, how)
    try:
        for epoch in (3, 4):        # retries run out: a StorageError naming op, key, last answer
            try:
                cp = db.checkpoint(epoch)
            except StorageError as e:   # a background flush or compaction of the outage, reported by this call
                msg = str(e)
                assert "background work failed (this call did nothing)" in msg, msg
                assert "flush" in msg or "compaction" in msg, msg
            else:
                with pytest.raises(StorageError) as info:
                    cp.wait()
                msg = str(info.value)
                assert f"checkpoint {epoch}: " in msg, msg
            assert re.search(rf"S3 {expect} {re.escape(inner.location)}/\S+ failed", msg), msg
            assert "last answer: " in msg, msg
            answer = {"500": "HTTP 500 InternalError", "503": "HTTP 503 SlowDown",
                      "reset_before": "ConnectionClosedError", "down": "Could not connect"}[how]
            assert answer in msg.split("last answer: ")[1], msg
            assert [c.epoch for c in db.checkpoints()][-1] == 2
    finally:
        _recover(proxy, how)
    # The endpoint is back: the same DB commits the next checkpoint, with every record.
    try:
        db.wait_idle()
    except StorageError:
        pass        # a background flush of the outage, reported once (its retry comes next)
    _fill(db, model, rng, 100)
    db.checkpoint(5).wait()
    snaps[5] = dict(model)
    _fill(db, model, rng, 100)
    db.flush()
    db.checkpoint(6).wait()
    snaps[6] = dict(model)
    assert contents(db) == model
    db.close()
    with dkv.open(store, read_only=True) as r:
        retained = [c.epoch for c in r.checkpoints()]
        assert retained == [2, 5, 6]
        assert contents(r) == snaps[6]
    for epoch in retained:
        with dkv.open(store, checkpoint=epoch, read_only=True) as r:
            assert contents(r) == snaps[epoch], f"checkpoint {epoch} differs"
    with dkv.open(store, **opts) as w:       # a new writer continues from the last one
        assert contents(w) == snaps[6]


@pytest.mark.parametrize("how", ["500", "down"])
def test_checkpoint_when_retries_run_out_then_the_endpoint_recovers(proxy, s3_server, tmp_path, how):
    # Memtables big enough that only the checkpoints (and the explicit flush) write.
    _checkpoint_through_an_outage(proxy, s3_server, tmp_path, how, dict(memtable_bytes=1 << 20, background=True),
                                  expect="put")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["503", "reset_before", "down"])
def test_checkpoint_through_an_outage_with_background_flushes(proxy, s3_server, tmp_path, how):
    from .dkv_helpers import SMALL
    _checkpoint_through_an_outage(proxy, s3_server, tmp_path, how, dict(SMALL, background=True), expect="put")


def test_a_big_object_is_read_in_parallel_ranged_parts(proxy, s3_server):
    """A whole-object get of more than part_bytes is ranged GETs of part_bytes (the first
    gives the size; the others run at once); each part has its own retries, so a part cut
    short is read again, not the whole object. An object within one part is one GET."""
    store = S3Store(s3_server.bucket, "parts-" + uuid.uuid4().hex, endpoint_url=proxy.endpoint,
                    region_name="us-east-1", max_attempts=4, read_timeout=60, retry_delay=0.01,
                    part_bytes=1000)
    data = bytes(range(256)) * 14       # 3,584 bytes: parts 0-999, 1000-1999, 2000-2999, 3000-3583
    store.put("big", data)
    store.put("small", b"s" * 999)
    store.put("empty", b"")
    proxy.log.clear()
    assert store.get("big") == data
    gets = [path for kind, _, path, _ in proxy.log if kind == "GET"]
    assert len(gets) == 4
    assert store.get("small") == b"s" * 999 and store.get("empty") == b""
    assert len([k for k, *_ in proxy.log if k == "GET"]) == 6
    proxy.force("GET", None, "short_body")      # the second request (a later part) comes short
    assert store.get("big") == data
    assert store.get("big", 10, 20) == data[10:20]              # ranges as before
    whole = S3Store(s3_server.bucket, store.prefix, endpoint_url=proxy.endpoint, region_name="us-east-1",
                    part_bytes=0)
    proxy.log.clear()
    assert whole.get("big") == data and len(proxy.log) == 1

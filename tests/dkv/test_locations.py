"""What an open finds at a location (issue 16): a read-only open of what is not a store
raises NotAStoreError and creates nothing; a writer creates a store only in a missing or
empty folder unless ``create="force"``; an instance opens from any folder above or at it
(its manifests name files relative to the folder its writer opened)."""
from __future__ import annotations

import dataclasses
import os
import uuid

import pytest

import dkv
from dkv.format import manifest as mf
from dkv.storage import MemoryStore, PrefixStore
from dkv.storage import memory as memory_mod


def _tree(folder) -> list:
    return sorted(os.path.relpath(os.path.join(b, f), folder) for b, _, fs in os.walk(folder) for f in fs)


def _fill(db, tag: bytes, n: int = 50) -> dict:
    data = {b"\x00\x01%s%03d" % (tag, i): b"v%d" % i for i in range(n)}
    for k, v in data.items():
        db.put(k, v)
    return data


# -- read-only opens -----------------------------------------------------------------------------

def test_a_read_only_open_of_what_is_no_store_says_so_and_creates_nothing(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(dkv.NotAStoreError, match=f"no dkv store at {missing}: the folder does not exist"):
        dkv.open(str(missing), read_only=True)
    assert not missing.exists()
    with pytest.raises(dkv.NotAStoreError, match="checkpoint 3: no dkv store"):
        dkv.open(str(missing), checkpoint=3, read_only=True)
    assert not missing.exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(dkv.NotAStoreError, match="the folder is empty"):
        dkv.open(str(tmp_path / "empty"), read_only=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(dkv.NotAStoreError, match="is a file, not a folder"):
        dkv.open(str(tmp_path / "file"), read_only=True)
    other = tmp_path / "other"
    (other / "sub").mkdir(parents=True)
    (other / "a.txt").write_text("a")
    (other / "sub" / "b.csv").write_text("b")
    with pytest.raises(dkv.NotAStoreError, match=r"holds 2 other objects \(a.txt, sub/b.csv\) but no dkv"):
        dkv.open(str(other), read_only=True)
    assert _tree(tmp_path) == ["file", "other/a.txt", "other/sub/b.csv"]
    # memory://: a name not in use stays unused
    name = f"never-{uuid.uuid4().hex}"
    with pytest.raises(dkv.NotAStoreError, match=f"memory://{name}: it holds no objects"):
        dkv.open(f"memory://{name}", read_only=True)
    assert name not in memory_mod._NAMED
    with pytest.raises(dkv.NotAStoreError):
        dkv.open(MemoryStore(), read_only=True)


def test_a_read_only_open_of_a_root_of_instances_names_them(tmp_path):
    root = str(tmp_path / "root")
    for ns in ("a", "b/c"):
        with dkv.open(root, instance=ns) as db:
            db.checkpoint(1).wait()
    with pytest.raises(dkv.NotAStoreError, match=r"holds 2 dkv instances, not one store.*'a', 'b/c'.*dkv instances"):
        dkv.open(root, read_only=True)
    with pytest.raises(dkv.NotAStoreError, match=r"root/b holds 1 dkv instance, not one store.*'b/c'") as e:
        dkv.open(root, instance="b", read_only=True)
    assert "instance=" in str(e.value)
    with pytest.raises(dkv.NotAStoreError, match=r"no dkv store at .*/root/x: the folder does not exist.*'a', 'b/c'"):
        dkv.open(root, instance="x", read_only=True)
    assert dkv.instances(root) == ["a", "b/c"]
    with pytest.raises(dkv.NotAStoreError, match="does not exist"):
        dkv.instances(str(tmp_path / "nothing"), required=True)
    assert dkv.instances(str(tmp_path / "nothing")) == [] and not (tmp_path / "nothing").exists()


# -- writers -------------------------------------------------------------------------------------

def test_a_writer_creates_a_store_only_where_there_is_none(tmp_path):
    for folder in (tmp_path / "new", tmp_path / "empty"):
        if folder.name == "empty":
            folder.mkdir()
        with dkv.open(str(folder)) as db:
            db.put(b"k", b"v")
            db.checkpoint(1).wait()
        with dkv.open(str(folder)) as db:             # an existing store
            assert db.get(b"k") == b"v"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("x")
    with pytest.raises(dkv.NotAStoreError, match=f"not creating a dkv store at {other}: it holds 1 object that is "
                                                 r"not a dkv store's \(todo.txt\).*create='force'"):
        dkv.open(str(other))
    assert _tree(other) == ["todo.txt"]             # nothing added
    with dkv.open(str(other), create="force") as db:
        db.put(b"k", b"v")
        db.checkpoint(1).wait()
    with dkv.open(str(other)) as db:                 # now it is a store
        assert db.get(b"k") == b"v"
    with pytest.raises(dkv.NotAStoreError, match="create=False opens only an existing store"):
        dkv.open(str(tmp_path / "absent"), create=False)
    assert not (tmp_path / "absent").exists()
    name = f"absent-{uuid.uuid4().hex}"
    with pytest.raises(dkv.NotAStoreError):
        dkv.open(f"memory://{name}", create=False)
    assert name not in memory_mod._NAMED
    with dkv.open(str(tmp_path / "new"), create=False) as db:
        assert db.get(b"k") == b"v"
    with pytest.raises(ValueError, match="create must be"):
        dkv.open(str(tmp_path / "x"), create="yes")


@pytest.mark.parametrize("bad", ["yes", "Force", 1, 0, None])
@pytest.mark.parametrize("read_only", [False, True])
def test_create_takes_only_true_false_or_force_even_where_a_store_is(tmp_path, bad, read_only):
    loc = str(tmp_path / "db")
    with dkv.open(loc) as db:
        db.put(b"k", b"v")
        db.checkpoint(1).wait()
    before = _tree(loc)
    for where in (loc, str(tmp_path / "new")):
        with pytest.raises(ValueError, match=f"create must be True, False or 'force', got {bad!r}"):
            dkv.open(where, create=bad, read_only=read_only)
    assert _tree(loc) == before and not (tmp_path / "new").exists()


def test_instances_are_created_beside_other_instances(tmp_path):
    """spark_ops opens shard instances in a folder holding other instances and its own files:
    only the instance's own folder has to be new or empty."""
    root = tmp_path / "op"
    root.mkdir()
    (root / "config").write_text("{}")
    for ns in ("L1/p0", "L1/p1"):
        with dkv.open(str(root), instance=ns) as db:
            db.checkpoint(1).wait()
    with pytest.raises(dkv.NotAStoreError) as e:     # the folder itself holds other files
        dkv.open(str(root))
    # ... and instances, which the writer most likely meant: named as a reader's error does
    assert str(e.value).startswith(f"{root} holds 2 dkv instances, not one store at its root: name one with "
                                   "instance= (--instance on the command line), e.g. 'L1/p0', 'L1/p1'; "
                                   f"`python -m dkv instances {root}` lists them all"), e.value
    assert "1 object that is not a dkv store's (config)" in str(e.value) and "create='force'" in str(e.value)
    (root / "config").unlink()
    with dkv.open(str(root)) as db:                  # only instances below: a root store may join them
        db.checkpoint(1).wait()
    assert dkv.instances(str(root)) == ["", "L1/p0", "L1/p1"]


@pytest.mark.s3
def test_an_s3_prefix_without_objects_is_empty(s3_server, tmp_path):
    url = s3_server.url()
    opts = dict(cache_dir=str(tmp_path / "cache"))
    with pytest.raises(dkv.NotAStoreError, match="no objects under this prefix"):
        dkv.open(url, read_only=True, **opts)
    with dkv.open(url, **opts) as db:
        db.put(b"k", b"v")
        db.checkpoint(1).wait()
    with dkv.open(url, read_only=True, **opts) as db:
        assert db.get(b"k") == b"v"
    other = s3_server.url()
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=other.split("/", 3)[3] + "/data.csv", Body=b"x")
    with pytest.raises(dkv.NotAStoreError, match=r"data.csv"):
        dkv.open(other, **opts)


# -- an instance from any folder around it -------------------------------------------------------

def _locations(kind, tmp_path, request):
    """(a store to write with as the operator's folder, its enclosing location, a way to
    name a folder below a location)."""
    if kind == "memory":
        base = MemoryStore()
        return base, lambda sub: PrefixStore(base, sub) if sub else base
    if kind == "local":
        base = str(tmp_path / "state")
    else:
        base = request.getfixturevalue("s3_server").url()
    opts = dict(cache_dir=str(tmp_path / "cache")) if kind == "s3" else {}
    return base, lambda sub: dkv.open_store(f"{base}/{sub}" if sub else base, **opts)


@pytest.mark.parametrize("kind", ["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def test_an_instance_opens_from_any_folder_around_it(kind, tmp_path, request):
    _, at = _locations(kind, tmp_path, request)
    op = at("q/op")
    small = dict(memtable_bytes=2000, flush_segments=2, background=False)
    with dkv.open(op, instance="L0/p0", **small) as a:
        model = _fill(a, b"a")
        a.checkpoint(1).wait()
        model.update(_fill(a, b"b", 5))
        a.checkpoint(2).wait()
    # a rescale: the new instance references L0/p0's SSTs and WAL segments
    with dkv.open(op, instance="L3/p0", sources=[("L0/p0", 2)], **{**small, "flush_segments": 8}) as b:
        b.put(b"\x00\x01new", b"1")
        b.checkpoint(3).wait()
    model[b"\x00\x01new"] = b"1"
    info = dkv.list_checkpoints(op, "L3/p0")[-1]
    m = mf.decode(op.get(info.name), info.name)
    assert any(t.path.startswith("L0/p0/sst/") for t in m.tables()) and any(r.ns == "L0/p0" for r in m.wal)
    views = [(at(""), "q/op/L3/p0"), (at("q"), "op/L3/p0"), (op, "L3/p0"), (at("q/op/L3"), "p0"),
             (at("q/op/L3/p0"), "")]
    for store, ns in views:
        with dkv.open(store, instance=ns, read_only=True) as db:
            assert dict(db.scan()) == model, (store, ns)
        assert dkv.verify(store, ns)["records"] >= len(model)
    # a writer that continues from its own folder names new files as its predecessors did
    with dkv.open(at("q/op/L3/p0"), **small) as w:
        w.put(b"\x00\x01later", b"2")
        w.checkpoint(4).wait()
    model[b"\x00\x01later"] = b"2"
    for store, ns in views:
        with dkv.open(store, instance=ns, read_only=True) as db:
            assert dict(db.scan()) == model and db.checkpoints()[-1].epoch == 4


def test_a_file_where_a_store_should_be_is_named_as_such(tmp_path):
    """ObjectSpace.open("notes.py") failed with a raw NotADirectoryError on '.../notes.py/retired'
    (issue 32): every open says the path is a file, and writes nothing."""
    f = tmp_path / "notes.py"
    f.write_text("x = 1\n")
    for kw in ({}, {"read_only": True}, {"create": "force"}, {"create": False}):
        with pytest.raises(dkv.NotAStoreError, match="notes.py: it is a file, not a folder"):
            dkv.open(str(f), **kw)
    assert f.read_text() == "x = 1\n"


def test_every_s3_store_option_passes_through_dkv_open(s3_server, tmp_path):
    """One list of S3 options (dkv.storage.S3_OPTIONS): each keyword S3Store takes for its
    connection is a dkv option, and dkv.open hands it over (issue 33: max_attempts could not)."""
    import inspect

    from dkv._options import Options
    from dkv.storage import S3_OPTIONS, S3Store

    own = {"bucket", "prefix", "client", "retry_delay", "credentials", "self"}
    takes = set(inspect.signature(S3Store.__init__).parameters) - own
    creds = {"aws_access_key_id", "aws_secret_access_key", "aws_session_token"}
    assert takes | creds == set(S3_OPTIONS)
    assert set(S3_OPTIONS) <= {f.name for f in dataclasses.fields(Options)}
    url = s3_server.url()
    with dkv.open(url, max_attempts=2, connect_timeout=3, read_timeout=5, cache_dir=str(tmp_path / "c")) as db:
        inner = db.store
        while not isinstance(inner, S3Store):
            inner = inner.inner
        assert inner.max_attempts == 2
        assert inner.client.meta.config.connect_timeout == 3 and inner.client.meta.config.read_timeout == 5
        db.put(b"k", b"v")
        db.checkpoint().wait()
    with pytest.raises(ValueError, match="max_attempts must be a positive int, got 0"):
        dkv.open(url, max_attempts=0)
    with pytest.raises(ValueError, match="read_timeout must be a positive number of seconds"):
        dkv.open(url, read_timeout=-1)

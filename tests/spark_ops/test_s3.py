"""A streaming query with its operator state on S3 (the moto server process, over real HTTP).

How the Python workers find the moto endpoint: the `s3_server` fixture sets AWS_* variables in the
driver's os.environ, but the workers are started by the JVM, which inherited the environment of
the moment the shared `spark` session started — usually before the fixture ran. What works
whatever the order: put the variables into ``sparkContext.environment`` (the `spark.executorEnv.*`
map); PySpark sends it with every Python function it ships, and the JVM starts the workers of
that function with it (a new worker pool per distinct environment), so it applies to the queries
built after the change. ``dkv_options={"endpoint_url": ..., credentials}`` on the operator is the per-operator way
(tested below with the workers' environment pointing nowhere).
"""
from __future__ import annotations

import pytest

import spark_ops
from .models import BufferModel, SessionModel, bag_by_key, run_model
from .spark_helpers import at, random_events, read_sink, read_stream, run_stream, write_batch_files

pytestmark = [pytest.mark.spark, pytest.mark.s3]


@pytest.fixture
def worker_env(spark):
    """Sets variables in the environment Spark gives its Python workers; restores it after."""
    env = spark.sparkContext.environment
    saved = dict(env)

    def set_(**values):
        env.update(values)

    yield set_
    env.clear()
    env.update(saved)


def _aws(s3_server) -> dict:
    return dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                AWS_ENDPOINT_URL_S3=s3_server.endpoint)


def _objects(s3_server, url: str) -> list[str]:
    prefix = url.split("/", 3)[3] + "/"
    pages = s3_server.client().get_paginator("list_objects_v2").paginate(Bucket=s3_server.bucket, Prefix=prefix)
    return [o["Key"][len(prefix):] for page in pages for o in page.get("Contents", [])]


def test_streaming_state_on_s3(s3_server, utc_spark, worker_env, tmp_path):
    worker_env(**_aws(s3_server))
    state = s3_server.url()
    batches = random_events(21, 4, keys="abc", late=False, even=True) + [[{"k": "zz", "ts": at(10_000_000), "v": -1}], []]
    write_batch_files(tmp_path / "src", batches)
    df = read_stream(utc_spark, tmp_path / "src")
    out = spark_ops.session_window(df, "k", "1501 ms", event_time="ts", watermark="500 ms", state=state)
    q = run_stream(out, tmp_path / "out", tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    expected = run_model(SessionModel(["k"], 1501), batches, keys=["k"], event_time="ts", delay_ms=500)
    assert sorted(got) == list(range(len(batches)))
    assert sum(map(len, expected)) > 0
    for b in range(len(batches)):
        assert bag_by_key(got[b], "k") == bag_by_key(expected[b], "k"), f"batch {b}"
    names = _objects(s3_server, state)
    root = f"{q.id}/session_window/"
    assert f"{root}config" in names and f"{root}layouts/L000000000000-n00002" in names
    assert any(n.startswith(f"{root}L000000000000-n00002/p00001/manifest/") for n in names)
    assert {n.split("/")[3] for n in names if n.startswith(f"{root}wm/")} == {f"{b:012d}" for b in got}
    assert not any(n.startswith(f"{root}metrics/") for n in names)    # metrics ride in the wm records
    recs = spark_ops.read_metrics(state)
    assert len(recs) == 2 * len(batches) and sum(r["rows"] for r in recs) == sum(map(len, batches))


def test_endpoint_and_credentials_through_dkv_options(s3_server, utc_spark, worker_env, tmp_path):
    """The workers' environment points nowhere; only dkv_options says where the store is."""
    worker_env(AWS_ENDPOINT_URL_S3="http://127.0.0.1:9", AWS_ACCESS_KEY_ID="wrong", AWS_SECRET_ACCESS_KEY="wrong",
               AWS_MAX_ATTEMPTS="1")
    state = s3_server.url()
    batches = random_events(22, 2, keys="ab", late=False)
    write_batch_files(tmp_path / "src", batches)
    opts = dict(endpoint_url=s3_server.endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                region_name="us-east-1")
    out = spark_ops.buffer(read_stream(utc_spark, tmp_path / "src"), "k", count=2, state=state, dkv_options=opts)
    run_stream(out, tmp_path / "out", tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    expected = run_model(BufferModel(["k"], count=2), batches, keys=["k"])
    assert [bag_by_key(got[b], "k") for b in range(2)] == [bag_by_key(e, "k") for e in expected]

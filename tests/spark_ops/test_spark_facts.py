"""Pins the Spark runtime facts spark_ops is built on (see docs/rfcs/0001-spark-runtime.md).

Each test runs a small streaming query (JSON file source, one file per micro-batch,
`trigger(availableNow=True)`, a `foreachBatch` sink that keeps one file per batch id) and
asserts one behaviour of PySpark 4.3 in local mode. If an upgrade breaks one of these, the
runtime's design must be revisited before the test is changed.

The functions shipped to Python workers are closures built inside factories so cloudpickle
sends them by value (the test module is not importable in the workers).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

SCHEMA = "k string, ts timestamp, v long"
PROBE_SCHEMA = (
    "bid long, qid string, run string, descr string, pid int, attempt int, pyid long, "
    "n long, keys string, pt string, wm long, props string"
)
BATCH_ID = "streaming.sql.batchId"
QUERY_ID = "sql.streaming.queryId"
RUN_ID = "spark.jobGroup.id"


# ---------------------------------------------------------------- source, probe, sink


def write_batches(src: Path, keys_per_batch: list[list[str]], start: int = 0) -> None:
    """One JSON-lines file per batch; event time of key i in batch b is b*10 + i seconds."""
    import pandas as pd

    src.mkdir(parents=True, exist_ok=True)
    for offset, keys in enumerate(keys_per_batch):
        b = start + offset
        pdf = pd.DataFrame({
            "k": keys,
            "ts": [pd.Timestamp("2024-01-01") + pd.Timedelta(seconds=10 * b + i) for i in range(len(keys))],
            "v": [b] * len(keys),
        })
        path = src / f"batch-{b:04d}.json"
        pdf.to_json(path, orient="records", lines=True, date_format="iso")
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))  # the source admits files by mtime


def make_probe(wm_dir: str | None = None, delay_ms: int = 0):
    """A mapInPandas function that reports, per task, what the runtime can see.

    With `wm_dir`, it also prototypes the store-propagated watermark of the RFC: each shard
    reads every shard's record of batch b-1, takes the max event time, subtracts the delay
    (the watermark of batch b), then writes max(that basis, its own rows' max) for batch b.
    """

    def probe(batches):
        import glob
        import json as _json
        import os as _os

        import pandas as _pd
        from pyspark import TaskContext

        tc = TaskContext.get()
        bid = int(tc.getLocalProperty("streaming.sql.batchId"))
        keys, pts, n, max_ts = [], set(), 0, None
        for pdf in batches:
            n += len(pdf)
            keys += [str(k) for k in pdf["k"]]
            pts |= {str(t) for t in pdf["pt"]}
            if len(pdf):
                m = int(_pd.Timestamp(pdf["ts"].max()).value // 1_000_000)
                max_ts = m if max_ts is None else max(max_ts, m)
        wm = None
        if wm_dir is not None:
            prev = [_json.load(open(p))["max_ts"] for p in glob.glob(f"{wm_dir}/{bid - 1}/*.json")]
            prev = [p for p in prev if p is not None]
            basis = max(prev) if prev else None
            wm = None if basis is None else max(0, basis - delay_ms)
            mine = max([x for x in (basis, max_ts) if x is not None], default=None)
            _os.makedirs(f"{wm_dir}/{bid}", exist_ok=True)
            tmp = f"{wm_dir}/{bid}/.{tc.partitionId()}.{_os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                _json.dump({"max_ts": mine}, fh)
            _os.replace(tmp, f"{wm_dir}/{bid}/{tc.partitionId()}.json")
        props = tc._localProperties  # the full map: only its key names are reported
        yield _pd.DataFrame({
            "bid": [bid],
            "qid": [tc.getLocalProperty("sql.streaming.queryId")],
            "run": [tc.getLocalProperty("spark.jobGroup.id")],
            "descr": [tc.getLocalProperty("spark.job.description")],
            "pid": [tc.partitionId()],
            "attempt": [tc.attemptNumber()],
            "pyid": [_os.getpid()],
            "n": [n],
            "keys": [_json.dumps(sorted(keys))],
            "pt": [_json.dumps(sorted(pts))],
            "wm": [wm],
            "props": [_json.dumps({k: props[k] for k in sorted(props) if not k.startswith("callSite")
                                   and "JavaOptions" not in k})],
        })

    return probe


def run_query(spark, src: Path, cp: Path, out: Path, build, crash_at: int | None = None):
    """Run `build(df)` over the files in `src` until they are all consumed (availableNow).

    The foreachBatch sink writes `out/<batch id>.<n>.json` (n counts re-runs of that batch)
    and, with `crash_at`, raises once in that batch (marker file), failing the query before
    Spark commits the batch. Returns (query id, run id, failed?).
    """
    out.mkdir(parents=True, exist_ok=True)
    marker = out / f"crashed-{crash_at}"

    def sink(batch_df, batch_id):
        rows = batch_df.toPandas()
        n = len(list(out.glob(f"{batch_id}.*.json")))
        rows.to_json(out / f"{batch_id}.{n}.json", orient="records", lines=True)
        if crash_at == batch_id and not marker.exists():
            marker.touch()
            raise RuntimeError(f"simulated crash in batch {batch_id}")

    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))
    query = (build(df).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(cp)).trigger(availableNow=True).start())
    failed = False
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException wrapping the sink's error
        assert "simulated crash" in str(exc)
        failed = True
    return str(query.id), str(query.runId), failed


def read_out(out: Path):
    """All sink files as one pandas frame with `file_bid` and `rerun` columns."""
    import pandas as pd

    frames = []
    for path in sorted(out.glob("*.json")):
        bid, rerun, _ = path.name.split(".")
        pdf = pd.read_json(path, lines=True)
        pdf["file_bid"], pdf["rerun"] = int(bid), int(rerun)
        frames.append(pdf)
    return pd.concat(frames, ignore_index=True)


def probed(df, n: int, probe=None, watermark: str | None = None, schema: str = PROBE_SCHEMA):
    """The pipeline under test: [watermark] -> current_timestamp -> repartition(n, k) -> probe."""
    from pyspark.sql import functions as F

    if watermark:
        df = df.withWatermark("ts", watermark)
    df = df.withColumn("pt", F.current_timestamp())
    return df.repartition(n, "k").mapInPandas(probe or make_probe(), schema)


def offset_log(cp: Path, bid: int) -> dict:
    """The metadata line of Spark's offset log entry for a batch (batchWatermarkMs, batchTimestampMs, conf)."""
    return json.loads((cp / "offsets" / str(bid)).read_text().splitlines()[1])


def key_partitions(pdf) -> dict[str, int]:
    """key -> partition id over all rows; asserts a key never appears in two partitions."""
    seen: dict[str, int] = {}
    for keys, pid in zip(pdf["keys"], pdf["pid"]):
        for k in json.loads(keys):
            assert seen.setdefault(k, pid) == pid, f"key {k} seen in partitions {seen[k]} and {pid}"
    return seen


@pytest.fixture
def shuffle_partitions(spark):
    """Restores spark.sql.shuffle.partitions after a test that changes it."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", before)


# ---------------------------------------------------------------- 1. ids in local properties


def test_local_properties_carry_batch_query_and_run_ids(spark, tmp_path):
    write_batches(tmp_path / "src", [["a", "b", "c"]] * 3)
    qid, run, _ = run_query(spark, tmp_path / "src", tmp_path / "cp", tmp_path / "out",
                            lambda df: probed(df, 2))
    rows = read_out(tmp_path / "out")
    assert sorted(set(rows["bid"])) == [0, 1, 2]
    assert (rows["bid"] == rows["file_bid"]).all()      # the property is the micro-batch id
    assert set(rows["qid"]) == {qid}                     # sql.streaming.queryId = query.id
    assert set(rows["run"]) == {run}                     # spark.jobGroup.id = query.runId
    for descr, bid in zip(rows["descr"], rows["bid"]):   # human-readable copy of the same ids
        assert f"id = {qid}" in descr and f"runId = {run}" in descr and descr.endswith(f"batch = {bid}")
    props = json.loads(rows["props"].iloc[0])
    for name in (BATCH_ID, QUERY_ID, RUN_ID, "spark.job.description", "spark.sql.shuffle.partitions",
                 "spark.sql.streaming.internal.stateStore.partitions", "__is_continuous_processing"):
        assert name in props, name
    assert props["__is_continuous_processing"] == "false"
    # Spark does not hand the event-time watermark to tasks: no property carries a value for it.
    assert not [k for k in props if "watermark" in k.lower() and k != "spark.sql.streaming.multipleWatermarkPolicy"]


# ---------------------------------------------------------------- 2. one task per partition, stable keys


def test_repartition_runs_every_partition_every_batch_with_stable_keys(spark, tmp_path):
    from pyspark.sql import functions as F

    n = 4
    # two keys for four partitions: at least two partitions are empty in every batch
    write_batches(tmp_path / "src", [["a", "b"], ["a", "b", "a"], ["b"]])
    run_query(spark, tmp_path / "src", tmp_path / "cp", tmp_path / "out", lambda df: probed(df, n))
    rows = read_out(tmp_path / "out")
    for bid, batch in rows.groupby("bid"):
        assert sorted(batch["pid"]) == list(range(n)), f"batch {bid} did not run every partition"
        assert (batch["n"] == 0).sum() >= 2, "expected empty partitions to run too"
    placement = key_partitions(rows)
    # the partition of a key is pmod(murmur3 hash with seed 42, n): computable on the driver
    expected = {r["k"]: r["p"] for r in spark.createDataFrame([(k,) for k in placement], "k string")
                .select("k", F.expr(f"pmod(hash(k), {n})").alias("p")).collect()}
    assert placement == expected


def test_shard_tokens_make_hash_partitioning_an_identity(spark, tmp_path):
    """Key groups map to contiguous shard ranges by repartitioning on a precomputed token."""
    from pyspark.sql import functions as F

    n, groups = 3, 16
    tokens = {}
    for row in spark.range(0, 1000).select("id", F.expr(f"pmod(hash(id), {n})").alias("p")).collect():
        tokens.setdefault(row["p"], row["id"])
        if len(tokens) == n:
            break
    token_of_shard = [tokens[s] for s in range(n)]
    write_batches(tmp_path / "src", [[f"key{i}" for i in range(40)]])

    def build(df):
        kg = F.expr(f"pmod(hash(k), {groups})")
        shard = F.floor(kg * n / groups).cast("int")
        token = F.element_at(F.array(*[F.lit(t).cast("long") for t in token_of_shard]), shard + 1)
        return (df.withColumn("kg", kg).withColumn("token", token)
                .repartition(n, "token").mapInPandas(_shard_probe(groups, n), "pid int, bad long, n long"))

    run_query(spark, tmp_path / "src", tmp_path / "cp", tmp_path / "out", build)
    rows = read_out(tmp_path / "out")
    assert sorted(rows["pid"]) == list(range(n))
    assert rows["bad"].sum() == 0 and rows["n"].sum() == 40


def _shard_probe(groups: int, n: int):
    def probe(batches):
        import pandas as _pd
        from pyspark import TaskContext

        pid, bad, total = TaskContext.get().partitionId(), 0, 0
        for pdf in batches:
            total += len(pdf)
            bad += int(((pdf["kg"] * n // groups) != pid).sum())
        yield _pd.DataFrame({"pid": [pid], "bad": [bad], "n": [total]})

    return probe


def test_repartition_without_a_count_is_coalesced_by_aqe(spark, tmp_path):
    """Why the runtime must always pass n: `repartition(col)` may run fewer tasks than shards."""
    write_batches(tmp_path / "src", [["a", "b", "c", "d"]])

    def build(df):
        from pyspark.sql import functions as F

        return df.withColumn("pt", F.current_timestamp()).repartition("k").mapInPandas(make_probe(), PROBE_SCHEMA)

    run_query(spark, tmp_path / "src", tmp_path / "cp", tmp_path / "out", build)
    rows = read_out(tmp_path / "out")
    if spark.conf.get("spark.sql.adaptive.enabled") == "true":
        assert len(rows) < int(spark.conf.get("spark.sql.shuffle.partitions"))


# ---------------------------------------------------------------- 3. crash and re-run


def test_restart_reruns_the_unfinished_batch_with_the_same_id_and_time(spark, tmp_path):
    src, cp, out = tmp_path / "src", tmp_path / "cp", tmp_path / "out"
    write_batches(src, [["a", "b", "c"], ["a", "d"], ["b", "c", "e"], ["a"]])
    build = lambda df: probed(df, 3)  # noqa: E731
    qid1, run1, failed = run_query(spark, src, cp, out, build, crash_at=2)
    assert failed
    qid2, run2, failed = run_query(spark, src, cp, out, build, crash_at=2)
    assert not failed
    assert qid1 == qid2 and run1 != run2          # query id survives the restart, run id does not
    rows = read_out(out)
    assert sorted(set(zip(rows["file_bid"], rows["rerun"]))) == [(0, 0), (1, 0), (2, 0), (2, 1), (3, 0)]
    first = rows[(rows["bid"] == 2) & (rows["rerun"] == 0)].sort_values("pid")
    again = rows[(rows["bid"] == 2) & (rows["rerun"] == 1)].sort_values("pid")
    assert set(first["run"]) == {run1} and set(again["run"]) == {run2}
    assert list(first["keys"]) == list(again["keys"])  # same rows, same partitions
    # current_timestamp() is the batch timestamp from the offset log: identical on re-run
    assert list(first["pt"]) == list(again["pt"])
    ts = {t for p in again["pt"] for t in json.loads(p)}
    assert len(ts) == 1
    import pandas as pd

    local = pd.Timestamp(ts.pop()).tz_localize(spark.conf.get("spark.sql.session.timeZone"))
    assert int(local.value // 1_000_000) == offset_log(cp, 2)["batchTimestampMs"]
    key_partitions(rows)  # and every key kept its partition across the restart


# ---------------------------------------------------------------- 4. partition counts on restart


def test_restart_with_another_partition_count(spark, tmp_path, shuffle_partitions):
    src, cp, out = tmp_path / "src", tmp_path / "cp", tmp_path / "out"
    write_batches(src, [["a", "b", "c", "d"]] * 2)
    run_query(spark, src, cp, out, lambda df: probed(df, 2))
    write_batches(src, [["a", "b", "c", "d"]] * 2, start=2)
    spark.conf.set("spark.sql.shuffle.partitions", "5")
    run_query(spark, src, cp, out, lambda df: probed(df, 3))
    rows = read_out(out)
    for bid, batch in rows.groupby("bid"):
        assert sorted(batch["pid"]) == list(range(2 if bid < 2 else 3))
        props = json.loads(batch["props"].iloc[0])
        # Spark >= 4.1 (SPARK-53942): a stateless query takes the new shuffle partitions on
        # restart; only the state partitions stay as the first run fixed them.
        assert props["spark.sql.shuffle.partitions"] == ("2" if bid < 2 else "5")
        assert props["spark.sql.streaming.internal.stateStore.partitions"] == "2"
    # the offset log keeps recording the first run's value
    assert offset_log(cp, 3)["conf"]["spark.sql.shuffle.partitions"] == "2"


def test_spark_state_partitions_are_fixed_by_the_first_run(spark, tmp_path, shuffle_partitions):
    """Spark's own stateful operators cannot rescale: their state partitions come from batch 0."""
    src, cp, out = tmp_path / "src", tmp_path / "cp", tmp_path / "out"

    def build(df):
        return df.dropDuplicates(["k"])

    write_batches(src, [["a", "b", "c"]])
    run_query(spark, src, cp, out, build)
    write_batches(src, [["d", "e"]], start=1)
    spark.conf.set("spark.sql.shuffle.partitions", "5")
    run_query(spark, src, cp, out, build)
    state_partitions = sorted(p.name for p in (cp / "state" / "0").iterdir() if p.name.isdigit())
    assert state_partitions == ["0", "1"]


# ---------------------------------------------------------------- 5. watermark


def test_store_propagated_watermark_is_uniform_and_matches_spark(spark, tmp_path):
    """Tasks do not see Spark's watermark; shards can derive the same value from batch b-1's records.

    Every shard (empty ones included) computes the same watermark in a batch, the value equals
    Spark's own `batchWatermarkMs` for that batch, and a re-run after a crash computes it again.
    """
    src, cp, out, wm_dir = tmp_path / "src", tmp_path / "cp", tmp_path / "out", tmp_path / "wm"
    write_batches(src, [["a", "b", "c"], ["d"], ["a", "b", "c", "d", "e", "f"], ["a"], ["b", "c"]])
    build = lambda df: probed(df, 4, make_probe(str(wm_dir), delay_ms=5000), watermark="5 seconds")  # noqa: E731
    run_query(spark, src, cp, out, build, crash_at=3)
    run_query(spark, src, cp, out, build, crash_at=3)
    rows = read_out(out)
    for (bid, rerun), batch in rows.groupby(["bid", "rerun"]):
        assert sorted(batch["pid"]) == [0, 1, 2, 3]
        wms = set(batch["wm"].fillna(-1).astype(int))
        assert len(wms) == 1, f"batch {bid}: shards disagree on the watermark {wms}"
        spark_wm = offset_log(cp, bid)["batchWatermarkMs"]
        assert wms.pop() == (-1 if bid == 0 else spark_wm), f"batch {bid}"
    assert len(rows[rows["bid"] == 3].groupby("rerun")) == 2


def test_tasks_of_a_batch_start_after_the_previous_batch_ended(spark, tmp_path):
    """The premise of the propagated watermark: batch b's records are complete when b+1 runs.

    Also records (without asserting) that a shard is not pinned to one Python worker.
    """
    src, cp, out = tmp_path / "src", tmp_path / "cp", tmp_path / "out"
    write_batches(src, [["a", "b", "c", "d", "e"]] * 6)
    run_query(spark, src, cp, out, lambda df: probed(df, 2, _timed_probe(), schema=TIMED_SCHEMA))
    rows = read_out(out).sort_values(["bid", "pid"])
    by_batch = rows.groupby("bid").agg(start=("start", "min"), end=("end", "max"))
    assert (by_batch["start"].iloc[1:].values >= by_batch["end"].iloc[:-1].values).all()
    workers = rows.pivot(index="bid", columns="pid", values="pyid")
    moved = int((workers.diff().fillna(0) != 0).to_numpy().sum())
    print(f"shard moved to another Python worker {moved} times in {workers.size - 2} steps")


TIMED_SCHEMA = "bid long, pid int, pyid long, n long, start double, end double"


def _timed_probe():
    def probe(batches):
        import os as _os
        import time as _time

        import pandas as _pd
        from pyspark import TaskContext

        start = _time.time()
        n = sum(len(pdf) for pdf in batches)
        _time.sleep(0.05)
        tc = TaskContext.get()
        yield _pd.DataFrame({"bid": [int(tc.getLocalProperty("streaming.sql.batchId"))],
                             "pid": [tc.partitionId()], "pyid": [_os.getpid()], "n": [n],
                             "start": [start], "end": [_time.time()]})

    return probe


def test_batch_dataframes_have_no_batch_or_query_id(spark):
    """spark_ops must tell a batch DataFrame from a stream: the ids are simply absent."""

    def probe(batches):
        import pandas as _pd
        from pyspark import TaskContext

        tc = TaskContext.get()
        n = sum(len(pdf) for pdf in batches)
        yield _pd.DataFrame({"pid": [tc.partitionId()], "n": [n],
                             "bid": [tc.getLocalProperty("streaming.sql.batchId")],
                             "qid": [tc.getLocalProperty("sql.streaming.queryId")]})

    df = spark.createDataFrame([(f"k{i}",) for i in range(10)], "k string")
    rows = df.repartition(3, "k").mapInPandas(probe, "pid int, n long, bid string, qid string").collect()
    assert sorted(r["pid"] for r in rows) == [0, 1, 2] and sum(r["n"] for r in rows) == 10
    assert {r["bid"] for r in rows} == {None} and {r["qid"] for r in rows} == {None}

"""Bad input gets a clear error when the DataFrame is built (not a task failure later),
naming what was wrong."""
from __future__ import annotations

import datetime as dt

import pytest

import spark_ops
from spark_ops import Operator, apply_operator
from spark_ops.testing import OperatorHarness

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def df(spark):
    return spark.createDataFrame([("a", dt.datetime(2024, 1, 1), 1)], "k string, ts timestamp, v long")


class Echo(Operator):
    def on_event(self, key, row, ctx):
        ctx.emit({"k": key})


def test_unknown_key_column(df):
    with pytest.raises(ValueError, match="nope"):
        apply_operator(df, Echo(), ["k", "nope"], output_schema="k string")


@pytest.mark.parametrize("call", [lambda df: spark_ops.buffer(df, key="user", count=2),
                                  lambda df: spark_ops.timeout(df, "user", "1 second", event_time="ts"),
                                  lambda df: spark_ops.session_window(df, "user", "1 second", event_time="ts")],
                         ids=["buffer", "timeout", "session_window"])
def test_unknown_key_column_in_built_in_operators(df, call):
    with pytest.raises(ValueError, match=r"user.*not in the input"):
        call(df)


def test_unknown_event_time_column(df):
    with pytest.raises(ValueError, match="when"):
        spark_ops.delay(df, "k", "1 second", event_time="when")


def test_watermark_without_event_time(df):
    with pytest.raises(ValueError, match="event_time"):
        apply_operator(df, Echo(), "k", output_schema="k string", watermark="10 seconds")
    with pytest.raises(ValueError, match="event_time"):
        spark_ops.buffer(df, "k", count=2, watermark="1 second")


def test_duration_buffer_without_event_time(df):
    with pytest.raises(ValueError, match="event_time"):
        spark_ops.buffer(df, "k", duration="1 minute")


@pytest.mark.parametrize("partitions,key_groups", [
    (5, 4), (2, 1 << 17), (-1, 4),
    (0, 4),
])
def test_partitions_and_key_groups_out_of_range(df, partitions, key_groups):
    with pytest.raises(ValueError, match="partitions"):
        spark_ops.buffer(df, "k", count=2, partitions=partitions, key_groups=key_groups)


@pytest.mark.parametrize("operator", [object(), Echo, "Echo", None], ids=["object", "class", "str", "None"])
def test_not_an_operator_instance(df, operator):
    """An object that is not an Operator instance (a class, a string) fails at once, not in a task."""
    with pytest.raises(TypeError, match="Operator"):
        apply_operator(df, operator, "k", output_schema="k string")


@pytest.mark.parametrize("value", ["10 parsecs", "ten seconds", "", "-5 seconds", -1, 1.5, True, [10]])
def test_bad_durations(df, value):
    with pytest.raises((ValueError, TypeError), match="duration|delay|watermark|gap|timeout"):
        spark_ops.delay(df, "k", value, event_time="ts")


@pytest.mark.parametrize("call", [
    lambda df: spark_ops.buffer(df, "k", duration=0, event_time="ts"),
    lambda df: spark_ops.timeout(df, "k", 0, event_time="ts"),
    lambda df: spark_ops.session_window(df, "k", 0, event_time="ts"),
    lambda df: spark_ops.session_window(df, "k", "10 seconds", event_time="ts", max_duration="5 seconds"),
    lambda df: spark_ops.delay(df, "k", "1 second", event_time="ts", watermark="soon"),
], ids=["zero window", "zero timeout", "zero gap", "max below gap", "bad watermark"])
def test_bad_operator_durations(df, call):
    with pytest.raises(ValueError):
        call(df)


@pytest.mark.parametrize("kwargs,match", [
    (dict(), "count= or duration="),
    (dict(count=0), "count"),
    (dict(count="3"), "count"),
    (dict(skip=2), "count"),
    (dict(count=3, skip=0), "skip"),
    (dict(count=3, skip=2, duration="1 second", event_time="ts"), "skip"),
])
def test_bad_buffer_arguments(df, kwargs, match):
    with pytest.raises(ValueError, match=match):
        spark_ops.buffer(df, "k", **kwargs)


def test_bad_combine_latest_inputs(df):
    with pytest.raises(ValueError, match="two or more"):
        spark_ops.combine_latest({"a": df}, key="k")
    with pytest.raises(ValueError, match="two or more"):
        spark_ops.combine_latest([df, df], key="k")
    with pytest.raises(ValueError, match="'b'.*user|user.*'b'"):
        spark_ops.combine_latest({"a": df.withColumnRenamed("k", "user"), "b": df}, key="user")


def test_bad_output_schema_and_name(df):
    with pytest.raises(TypeError, match="output_schema"):
        apply_operator(df, Echo(), "k", output_schema=42)
    with pytest.raises(ValueError, match="name"):
        apply_operator(df, Echo(), "k", output_schema="k string", name="../escape")
    with pytest.raises(ValueError, match="key"):
        apply_operator(df, Echo(), [], output_schema="k string")


def test_keys_and_order_columns_need_an_order(spark, df):
    nested = spark.createDataFrame([("a", [1], {"x": 1}, 1)], "k string, arr array<int>, m map<string,int>, v long")
    with pytest.raises(TypeError, match=r"'arr' \(array<int>\) cannot be a key"):
        apply_operator(nested, Echo(), "arr", output_schema="k string")
    with pytest.raises(TypeError, match=r"'m' \(map<string,int>\) cannot be a key or order_by"):
        apply_operator(nested, Echo(), "k", order_by=["v", "m"], output_schema="k string")
    with pytest.raises(ValueError, match=r"order_by column\(s\) \['nope'\]"):
        apply_operator(df, Echo(), "k", order_by="nope", output_schema="k string")


def test_harness_row_without_the_key():
    h = OperatorHarness(Echo(), key="k")
    with pytest.raises(KeyError, match="k"):
        h.run_batch([{"v": 1}])


def test_event_time_must_be_a_timestamp_or_integer_column(spark):
    df = spark.createDataFrame([("a", "2024-01-01", 1.5)], "k string, day string, x double")
    with pytest.raises(TypeError, match="day"):
        spark_ops.delay(df, "k", "1 second", event_time="day")
    with pytest.raises(TypeError, match="x"):
        spark_ops.timeout(df, "k", "1 second", event_time="x")


def test_a_null_in_a_not_null_output_column_names_the_column(df, tmp_path):
    """Spark alone would fail reading the batch with "Value at index is null"."""
    class NullV(Operator):
        def on_event(self, key, row, ctx):
            ctx.emit({"k": key, "v": None})

    out = apply_operator(df, NullV(), "k", output_schema="k string, v long not null", state=str(tmp_path))
    with pytest.raises(Exception, match=r"null for 'v', which the output schema declares NOT NULL"):
        out.collect()


def test_a_users_exception_in_a_shard_host_reads_first_as_their_exception_and_frame(spark, tmp_path):
    """What a streaming query reports when on_event raises in a shard host: the user's
    exception right after one frame, then where in their code it was raised; none of the
    frames of the call to the host (issue 16: the lines 'except _host.HostError' and
    'lock.close()' came first, in 2.7 KB)."""
    from pyspark.errors import StreamingQueryException
    from .spark_helpers import at, read_stream, run_stream, write_batch_files

    class Boom(Operator):
        def on_event(self, key, row, ctx):
            if row["v"] == 2:
                raise ValueError(f"boom at v=2 for {key}")   # the user's line
            ctx.emit({"k": key})
    write_batch_files(tmp_path / "src", [[{"k": "a", "ts": at(0), "v": 1}], [{"k": "b", "ts": at(1), "v": 2}]])
    out = apply_operator(read_stream(spark, tmp_path / "src"), Boom(), "k", output_schema="k string",
                         state=str(tmp_path / "state"), partitions=2, shard_host=True)
    with pytest.raises(StreamingQueryException) as info:
        run_stream(out, tmp_path / "out", tmp_path / "cp")
    text = str(info.value)
    py = text[text.index("An exception was thrown from the Python worker"):]   # the task's part
    lines = py.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("ValueError: boom at v=2 for b"))
    assert lines[1] == "Traceback (most recent call last):" and first <= 4, lines[:8]   # one frame, then theirs
    assert "raised in the spark_ops shard host at:" in lines[first + 1]
    assert "test_errors.py" in lines[first + 2] and "in on_event" in lines[first + 2]
    assert 'raise ValueError(f"boom at v=2 for {key}")' in lines[first + 3]
    for noise in ("except _host.HostError", "lock.close()", "_request", "run_shard_batch"):
        assert noise not in py[:py.index("ValueError: boom")], noise


def test_the_data_source_types_the_store_options_spark_hands_it_as_strings():
    import dkv
    from spark_ops.datasource import _store_options
    got = _store_options({"endpoint_url": "http://127.0.0.1:9", "range_read_cost": "0", "cache_bytes": "1048576",
                          "read_timeout": "2.5", "fsync": "false", "epoch": "3", "part_bytes": ""})
    assert got == {"endpoint_url": "http://127.0.0.1:9", "range_read_cost": 0, "cache_bytes": 1 << 20,
                   "read_timeout": 2.5, "fsync": False}
    assert set(got) <= set(dkv.STORE_OPTIONS)
    with pytest.raises(ValueError, match="option range_read_cost must be an int, got '4m'"):
        _store_options({"range_read_cost": "4m"})
    with pytest.raises(ValueError, match="option read_timeout must be a number of seconds, got 'soon'"):
        _store_options({"read_timeout": "soon"})

"""OperatorHarness(output_schema=...): emitted rows checked as the Spark path checks them
(spark_ops/_output.py), so a misspelled key fails in a harness test and not only on Spark;
and the DDL strings it reads without Spark (spark_ops/_ddl.py) read as Spark reads them."""
from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_ops import Operator
from spark_ops._ddl import parse_schema
from spark_ops import UnknownKeyError
from spark_ops.testing import OperatorHarness

SCHEMA = "user string, total double"


class Totals(Operator):
    """Sums ``amount`` per user and emits the running total, under the key ``out_key``."""

    def __init__(self, out_key: str = "total", value=None) -> None:
        self.out_key, self.value = out_key, value

    def on_event(self, key, row, ctx):
        total = ctx.value("total", default=0.0)
        total.value += row["amount"]
        ctx.emit({"user": key, self.out_key: total.value if self.value is None else self.value})


ROWS = [{"user": "a", "amount": 2.5}, {"user": "b", "amount": 1.0}, {"user": "a", "amount": 5.0}]


def test_without_output_schema_rows_are_not_checked():
    h = OperatorHarness(Totals("totl"), key="user")
    assert sorted(r["totl"] for r in h.run_batch(ROWS)) == [1.0, 2.5, 7.5]


@pytest.mark.parametrize("schema", [SCHEMA, StructType([StructField("user", StringType()),
                                                        StructField("total", LongType())])])
def test_a_misspelled_key_is_the_spark_paths_unknown_key_error(schema):
    h = OperatorHarness(Totals("totl"), key="user", output_schema=schema)
    with pytest.raises(UnknownKeyError, match=r"^spark_ops: the operator emitted key\(s\) 'totl', for which the "
                                              r"output schema has no column \(it has user, total\); the row has no "
                                              r"'total'"):
        h.run_batch(ROWS)


def test_good_rows_come_back_as_emitted_in_every_batch():
    h = OperatorHarness(Totals(), key="user", output_schema=SCHEMA, partitions=2)
    out = h.run_batch(ROWS)
    assert sorted((r["user"], r["total"]) for r in out) == [("a", 2.5), ("a", 7.5), ("b", 1.0)]
    h.restart()
    assert h.run_batch([{"user": "a", "amount": 1.0}]) == [{"user": "a", "total": 8.5}]
    assert h.run_batch([]) == []


def test_a_value_that_does_not_fit_or_a_null_in_a_not_null_column_names_the_column():
    h = OperatorHarness(Totals(value="lots"), key="user", output_schema=SCHEMA)
    with pytest.raises(TypeError, match=r"output column 'total' \(double\)"):
        h.run_batch(ROWS)
    h = OperatorHarness(Totals(out_key="other", value=1.0), key="user", output_schema="user string, total double "
                                                                                      "NOT NULL, other double")
    with pytest.raises(TypeError, match=r"null for 'total', which the output schema declares NOT NULL"):
        h.run_batch(ROWS)


def test_a_bad_output_schema_is_an_error_when_the_harness_is_made():
    with pytest.raises(TypeError, match="output_schema must be a StructType or a DDL string, got int"):
        OperatorHarness(Totals(), key="user", output_schema=42)
    with pytest.raises(ValueError, match=r"cannot read the schema 'user strng' without Spark: unknown type 'strng'"):
        OperatorHarness(Totals(), key="user", output_schema="user strng")


DDL = [
    "user string, total double",
    "k STRING NOT NULL, n BIGINT, at timestamp, d date, b binary, ok boolean",
    "a: int, b: smallint, c tinyint, d short, e byte, f long, g integer, h float, i real",
    "m decimal(12, 2), n dec, o numeric(5)",
    "items array<struct<name: string, at: timestamp NOT NULL>>, tags map<string, array<bigint>>",
    "`odd name` string COMMENT 'a comment', `back``tick` int",
    "struct<x: double, y: struct<z: string>>",
    "t timestamp_ntz, u timestamp_ltz, e struct<>",
]


@pytest.mark.spark
def test_ddl_strings_read_as_spark_reads_them(spark):
    from pyspark.sql.types import _parse_datatype_string
    for text in DDL:
        assert parse_schema(text) == _parse_datatype_string(text), text


def test_ddl_strings_the_harness_cannot_read_name_what_it_did_not_understand():
    for text, what in [("a int,", "the string ends early"), ("a int b", "unexpected 'b'"),
                       ("a array<int", "expected '>'"), ("a int NOT", "expected NULL after NOT"),
                       ("a interval day", "unknown type 'interval'"), ("a int; b int", "unexpected ';"),
                       ("", "the string ends early")]:
        with pytest.raises(ValueError, match="pass a pyspark StructType instead") as e:
            parse_schema(text)
        assert what in str(e.value), (text, str(e.value))


def test_event_times_and_nested_rows_fit_a_ddl_schema():
    class Sessions(Operator):
        def on_event(self, key, row, ctx):
            ctx.emit({"user": key, "at": ctx.to_datetime(ctx.event_time), "items": [{"v": row["v"]}]})

    h = OperatorHarness(Sessions(), key="user", event_time="ts",
                        output_schema="user string, at timestamp, items array<struct<v: bigint>>")
    out = h.run_batch([{"user": "a", "ts": 1_000, "v": 3}])
    assert out == [{"user": "a", "at": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc),
                    "items": [{"v": 3}]}]


def test_an_operators_own_output_schema_is_checked_without_output_schema_given():
    """Operator.output_schema ("set by the operator or by output_schema=") is what the harness
    checks when output_schema= is not given, as apply_operator uses it (issue 32)."""
    import spark_ops

    class Totals(spark_ops.Operator):
        output_schema = "k string, total double"

        def on_event(self, key, row, ctx):
            ctx.emit({"k": key, "totl": 1.0})

    h = spark_ops.testing.OperatorHarness(Totals(), key="k")
    with pytest.raises(spark_ops.UnknownKeyError, match="totl"):
        h.run_batch([{"k": "a"}])
    assert h.spec.key_groups == 256             # Spark's default count of key groups, as apply_operator's

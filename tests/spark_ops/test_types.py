"""Values through the Spark glue: what an operator sees for nested and special types, what
Spark gets back from what it emits, and a clear error for a value that does not fit."""
from __future__ import annotations

import datetime as dt
import decimal

import pytest

from spark_ops import Operator, apply_operator

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc
T1 = dt.datetime(2024, 3, 31, 1, 30, 0, 250, tzinfo=UTC)      # a DST change in Europe/Berlin


def inspect_operator() -> Operator:
    """Built in a function so cloudpickle ships the class by value (workers cannot import tests)."""

    class Inspect(Operator):
        """Emits, per row, the Python types and values it was given, and datetimes of its own."""

        def on_event(self, key, row, ctx):
            st, arr, m = row["st"], row["arr"], row["m"]
            ctx.value("seen", 0).value += 1            # the row's values are storable state
            ctx.list("rows").append(row)
            ctx.emit({
                "k": key, "ts": row["ts"], "st": st, "arr": arr, "m": m, "day": row["day"], "dec": row["dec"],
                "types": ",".join(type(v).__name__ for v in (row["ts"], st, st["t"], arr, arr[0], m, row["day"],
                                                             row["dec"], row["bin"])),
                "ts_tz": str(row["ts"].tzinfo), "nested_tz": str(st["t"].tzinfo),
                "naive_out": dt.datetime(2024, 1, 1, 12, 0), "aware_out": dt.datetime(2024, 1, 1, 12, 0, tzinfo=UTC),
            })

    return Inspect()


SCHEMA_IN = ("k string, ts timestamp, st struct<t: timestamp, n: long>, arr array<timestamp>, "
             "m map<string, long>, day date, dec decimal(10, 2), bin binary")
SCHEMA_OUT = ("k string, ts timestamp, st struct<t: timestamp, n: long>, arr array<timestamp>, "
              "m map<string, long>, day date, dec decimal(10, 2), types string, ts_tz string, nested_tz string, "
              "naive_out timestamp, aware_out timestamp")


def test_nested_and_special_types_reach_the_operator_as_plain_python_and_come_back(spark, tmp_path):
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Europe/Berlin")    # not UTC: nothing may depend on it
    try:
        df = spark.createDataFrame(
            [("a", T1, {"t": T1, "n": 1}, [T1, None], {"x": 1}, dt.date(2024, 3, 31), decimal.Decimal("1.25"),
              b"\x00\x01")], SCHEMA_IN)
        out = apply_operator(df, inspect_operator(), "k", output_schema=SCHEMA_OUT, state=str(tmp_path / "s"))
        (row,) = out.selectExpr("*", "unix_micros(ts) AS ts_us", "unix_micros(st.t) AS st_us",
                                "unix_micros(arr[0]) AS arr_us", "unix_micros(naive_out) AS naive_us",
                                "unix_micros(aware_out) AS aware_us").collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    micros = (T1 - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    # The operator saw plain Python values: an aware UTC datetime for the top-level column,
    # naive UTC datetimes inside structs and arrays, a dict for the map.
    assert row["types"] == "datetime,dict,datetime,list,datetime,dict,date,Decimal,bytes"
    assert row["ts_tz"] == "UTC" and row["nested_tz"] == "None"
    # Every instant survived the round trip exactly, whatever the session time zone.
    assert row["ts_us"] == row["st_us"] == row["arr_us"] == micros
    assert row["m"] == {"x": 1} and row["day"] == dt.date(2024, 3, 31) and row["dec"] == decimal.Decimal("1.25")
    assert row["st"]["n"] == 1 and row["arr"][1] is None
    # Emitted datetimes: aware ones are their instant; naive ones are taken as UTC.
    noon = (dt.datetime(2024, 1, 1, 12, tzinfo=UTC) - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
    assert row["naive_us"] == row["aware_us"] == noon


def emitting(make_row) -> Operator:
    class Emit(Operator):
        def on_event(self, key, row, ctx):
            ctx.emit(make_row(key, row))
    return Emit()


def test_an_emitted_value_that_does_not_fit_names_its_column(spark, tmp_path):
    df = spark.createDataFrame([("a", 1)], "k string, v long")
    out = apply_operator(df, emitting(lambda k, r: {"k": k, "n": "not a number"}), "k", output_schema="k string, n long", state=str(tmp_path / "s"))
    with pytest.raises(Exception, match=r"output column 'n' \(int64\)"):
        out.collect()


def test_an_emitted_key_that_names_no_column_is_an_error_naming_it(spark, tmp_path):
    """A misspelled key would otherwise leave its column null and be dropped without a word."""
    df = spark.createDataFrame([("a", 1)], "k string, v long")
    out = apply_operator(df, emitting(lambda k, r: {"k": k, "count": r["v"]}), "k", output_schema="k string, n long",
                         state=str(tmp_path / "s"))
    with pytest.raises(Exception, match=r"emitted key\(s\) 'count', for which the output schema has no column "
                                        r"\(it has k, n\); the row has no 'n'"):
        out.collect()


def test_rows_emitted_as_tuples_fill_the_columns_in_order(spark, tmp_path):
    df = spark.createDataFrame([("a", 1), ("b", 2)], "k string, v long")
    out = apply_operator(df, emitting(lambda k, r: (k, r["v"] * 2)), "k", output_schema="k string, n long", state=str(tmp_path / "s"))
    assert sorted(tuple(r) for r in out.collect()) == [("a", 2), ("b", 4)]

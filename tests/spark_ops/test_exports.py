"""The public surface of spark_ops, pinned (a change here is a change of the API)."""
from __future__ import annotations

import spark_ops
import spark_ops.testing


def test_public_names():
    assert sorted(spark_ops.__all__) == sorted(["buffer", "combine_latest", "delay", "timeout", "session_window",
                                                "apply_operator", "Operator", "Context", "Timer", "read_metrics",
                                                "read_timers", "snapshot_bytes", "register_datasource",
                                                "metrics_listener", "progress_metrics", "StaleRunError",
                                                "UnknownKeyError", "StateVar", "SparkOpsError",
                                                "StateMismatchError", "EpochGapError", "NoStateError", "read_operators",
                                                "read_vars"])
    for name in spark_ops.__all__:
        assert getattr(spark_ops, name).__doc__, f"{name} has no docstring"
    assert spark_ops.testing.__all__ == ["OperatorHarness"]
    assert issubclass(spark_ops.UnknownKeyError, TypeError)     # caught as the TypeError it was
    # One root; each error is also the builtin it is a case of.
    for err, builtin in ((spark_ops.StaleRunError, RuntimeError), (spark_ops.UnknownKeyError, TypeError),
                         (spark_ops.StateMismatchError, ValueError), (spark_ops.EpochGapError, ValueError)):
        assert issubclass(err, spark_ops.SparkOpsError) and issubclass(err, builtin)
    assert issubclass(spark_ops.EpochGapError, spark_ops.StateMismatchError)


def test_operator_hooks_have_defaults():
    """Only on_event is required; open, on_timer and close do nothing by default."""
    op = spark_ops.Operator()
    assert op.open(None) is None and op.on_timer("k", spark_ops.Timer(0), None) is None and op.close(None) is None
    try:
        op.on_event("k", {}, None)
    except NotImplementedError as e:
        assert "on_event" in str(e)
    else:
        raise AssertionError("on_event must be implemented")


def test_timers_order_by_time_then_name():
    T = spark_ops.Timer
    assert sorted([T(5, "b"), T(5, "a"), T(1, "z")]) == [T(1, "z"), T(5, "a"), T(5, "b")]
    assert T(3).kind == "event"

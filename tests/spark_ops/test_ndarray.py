"""``ctx.ndarray``: a key's chunked n-dimensional array, through OperatorHarness (restart,
re-run of a batch, rescale): the state a plain numpy model holds."""
from __future__ import annotations

import numpy as np

from spark_ops import Operator
from spark_ops.testing import OperatorHarness


class HourlyHistogram(Operator):
    """Per user: counts of events by (day of week, hour), a 7 x 24 int32 array; emits the
    user's total and the count of the event's cell."""

    def on_event(self, key, row, ctx):
        h = ctx.ndarray("hist", (7, 24), "int32", chunks=(7, 8))
        h[row["day"], row["hour"]] += 1
        ctx.emit({"user": key, "total": int(h.to_numpy().sum()), "cell": int(h[row["day"], row["hour"]])})


def test_ndarray_state_survives_restart_rerun_and_rescale():
    rng = np.random.default_rng(3)
    batches = [[{"user": f"u{int(u)}", "day": int(d), "hour": int(h)}
                for u, d, h in zip(rng.integers(0, 5, 40), rng.integers(0, 7, 40), rng.integers(0, 24, 40))]
               for _ in range(4)]
    model: dict = {}
    h = OperatorHarness(HourlyHistogram(), key="user", partitions=2)
    for b, rows in enumerate(batches):
        want = []
        for r in rows:
            m = model.setdefault(r["user"], np.zeros((7, 24), dtype=np.int32))
            m[r["day"], r["hour"]] += 1
            want.append({"user": r["user"], "total": int(m.sum()), "cell": int(m[r["day"], r["hour"]])})
        if b == 1:
            h.restart()
        if b == 2:
            h.rescale(3)
        got = h.run_batch(rows)
        key = lambda r: (r["user"], r["total"])   # noqa: E731
        assert sorted(got, key=key) == sorted(want, key=key), f"batch {b}"
        if b == 3:                     # Spark runs the last batch again: the same output
            h.rerun_batch(3)
            assert sorted(h.run_batch(rows), key=key) == sorted(want, key=key)
    h.close()

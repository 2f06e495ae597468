"""examples/demo.py's input makes its session_window end sessions both ways, by a user's
next event and by the event-time timer. Run through OperatorHarness (the runtime Spark
runs, without Spark), with the demo's gap and watermark delay."""
from __future__ import annotations

import importlib.util
import json
import os

from spark_ops._units import duration_ms
from spark_ops.operators import SessionWindow
from spark_ops.testing import OperatorHarness

DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "demo.py")


def _demo():
    spec = importlib.util.spec_from_file_location("objectspace_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_sessions_close_by_event_and_by_timer(tmp_path):
    demo = _demo()
    users, batches = 60, 30
    demo.write_input(str(tmp_path), users, batches)
    files = sorted(os.listdir(tmp_path))
    assert len(files) == batches
    h = OperatorHarness(SessionWindow(duration_ms(demo.SESSION_GAP, "gap"), key_columns=("user",), items=False),
                        key="user", event_time="ts", watermark=demo.WATERMARK)
    closed = []
    for name in files:
        with open(tmp_path / name) as f:
            rows = [json.loads(line) for line in f]
        for r in rows:
            r["ts"] *= 1000                     # the demo casts seconds to a timestamp
        closed.append(len(h.run_batch(rows)))
    fired = [sum(m["timers_fired"] for m in h.metrics if m["batch"] == b) for b in range(batches)]
    # Before the end every session closes in on_event; in the last batch, after the pause,
    # the timers of the users who stopped sending (all but every fifth) close theirs.
    assert sum(closed[:-1]) > 0 and fired[:-1] == [0] * (batches - 1)
    assert fired[-1] == users - users // 5 and closed[-1] >= fired[-1]

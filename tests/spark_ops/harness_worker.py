"""A stand-in for one Spark Python worker: keeps an OperatorHarness (and so the runtime's
per-process cache of open shard states) alive across batches and runs the batches it is told to.

Protocol: one JSON object per stdin line, one JSON line back on stdout.
    {"cmd": "run", "batch": 3, "rows": [...]}   -> {"out": [...]}   (runs batch 3 on every shard)
    {"cmd": "quit"}
Started from the root as ``python -m tests.spark_ops.harness_worker <state folder> <count> <partitions>``;
the operator is ``Buffer(count)`` keyed by ``k``.
"""
from __future__ import annotations

import json
import sys

from spark_ops.operators import Buffer
from spark_ops.testing import OperatorHarness


def main() -> None:
    state, count, partitions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    h = OperatorHarness(Buffer(count=count, key_columns=("k",)), key="k", partitions=partitions,
                        key_groups=8, state=state)
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "quit":
            break
        h.batch_id = msg["batch"]       # no restart(): the cached shard states stay as they are
        try:
            out = {"out": h.run_batch(msg["rows"])}
        except Exception as e:  # noqa: BLE001 - reported to the test
            out = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

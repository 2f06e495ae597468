"""State TTL: a page count per user whose entries expire an hour after their last write,
and a queue of recent events whose elements expire one by one (runs without Spark, on the
test harness, with a clock we set: processing time is each batch's batch_time).

    scripts/env.sh python examples/ttl_example.py
"""
from spark_ops import Operator
from spark_ops.testing import OperatorHarness

MINUTE = 60_000


class RecentPages(Operator):
    def on_event(self, key, row, ctx):
        pages = ctx.dict("pages", ttl="1 hour")        # each page's entry expires on its own
        recent = ctx.queue("recent", ttl="30 minutes")  # each element expires on its own
        pages[row["page"]] = pages.get(row["page"], 0) + 1
        recent.append(row["page"])
        ctx.emit({"user": key, "pages": dict(pages), "recent": list(recent)})


h = OperatorHarness(RecentPages(), key="user")
batches = [
    (0, [{"user": "ann", "page": "home"}, {"user": "ann", "page": "docs"}]),
    (20, [{"user": "ann", "page": "docs"}]),
    (45, [{"user": "ann", "page": "blog"}]),     # home and the first docs left `recent` at 30 min
    (90, [{"user": "ann", "page": "home"}]),     # home (60 min) and docs (80 min) expired: home starts again
]
for minute, rows in batches:
    for out in h.run_batch(rows, processing_time=minute * MINUTE, batch_time=minute * MINUTE):
        print(f"minute {minute:3d}: pages={out['pages']} recent={out['recent']}")

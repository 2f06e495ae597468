"""A custom operator with the public API: a running total per user that also reports users
who stop paying (an event-time timer), with state that survives restarts."""
from _stream import run, session, stream, workdir, write_batches

from spark_ops import Operator, apply_operator

IDLE_MS = 60_000


class RunningTotal(Operator):
    def on_event(self, key, row, ctx):
        total = ctx.value("total", default=0.0)
        total.value += row["amount"]
        last = ctx.value("last")
        if last.value is not None:
            ctx.delete_event_timer(last.value + IDLE_MS)
        last.value = ctx.event_time
        ctx.register_event_timer(ctx.event_time + IDLE_MS)
        ctx.emit({"user": key, "total": total.value, "status": "active"})

    def on_timer(self, key, timer, ctx):
        ctx.emit({"user": key, "total": ctx.value("total").value, "status": "idle"})


base = workdir("custom")
t = 1_700_000_000
write_batches(f"{base}/in", [
    [{"user": "ann", "ts": t, "amount": 5.0}, {"user": "bob", "ts": t + 1, "amount": 2.0}],
    [{"user": "ann", "ts": t + 30, "amount": 1.5}],
    [{"user": "ann", "ts": t + 90, "amount": 1.0}],       # watermark now t+90: bob idle, reported
    [],                                                   # (a batch sees the previous batch's watermark)
])
spark = session()
payments = stream(spark, f"{base}/in", "user string, ts long, amount double")
out = apply_operator(payments, RunningTotal(), key="user", event_time="ts", watermark="0 seconds",
                     output_schema="user string, total double, status string", state=f"{base}/state")
run(out, base, show=lambda r: (r.user, r.total, r.status))

"""session_window: a user's session closes after 30 s without events (event time)."""
from _stream import run, session, stream, workdir, write_batches

import spark_ops

base = workdir("session_window")
t = 1_700_000_000
write_batches(f"{base}/in", [
    [{"user": "ann", "ts": t}, {"user": "ann", "ts": t + 10}, {"user": "bob", "ts": t + 5}],
    [{"user": "ann", "ts": t + 100}, {"user": "bob", "ts": t + 20}],
    [{"user": "bob", "ts": t + 200}],          # moves the watermark: earlier sessions close
])
spark = session()
events = stream(spark, f"{base}/in", "user string, ts long")
out = spark_ops.session_window(events, key="user", gap="30 seconds", event_time="ts",
                               watermark="5 seconds", items=False, state=f"{base}/state")
run(out, base, show=lambda r: (r.user, str(r.session_start), str(r.session_end), r["count"]))

"""timeout: report users with no event for 60 s of event time."""
from _stream import run, session, stream, workdir, write_batches

import spark_ops

base = workdir("timeout")
t = 1_700_000_000
write_batches(f"{base}/in", [
    [{"user": "ann", "ts": t}, {"user": "bob", "ts": t}],
    [{"user": "ann", "ts": t + 50}],
    [{"user": "ann", "ts": t + 100}],
    [{"user": "ann", "ts": t + 150}],           # bob has been silent for 150 s by now
])
spark = session()
events = stream(spark, f"{base}/in", "user string, ts long")
out = spark_ops.timeout(events, key="user", duration="60 seconds", event_time="ts", state=f"{base}/state")
run(out, base, show=lambda r: (r.user, str(r.last_event), str(r.timeout_at)))

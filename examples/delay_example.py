"""delay: hold every event until the watermark is 30 s past its event time."""
from _stream import run, session, stream, workdir, write_batches

import spark_ops

base = workdir("delay")
t = 1_700_000_000
write_batches(f"{base}/in", [
    [{"user": "ann", "ts": t, "msg": "first"}],
    [{"user": "ann", "ts": t + 20, "msg": "second"}],
    [{"user": "bob", "ts": t + 60, "msg": "third"}],
    [{"user": "bob", "ts": t + 120, "msg": "fourth"}],
])
spark = session()
events = stream(spark, f"{base}/in", "user string, ts long, msg string")
out = spark_ops.delay(events, key="user", duration="30 seconds", event_time="ts", state=f"{base}/state")
run(out, base, show=lambda r: (r.user, r.msg, str(r.ts)))

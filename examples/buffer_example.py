"""buffer: every 3 events of a user become one output row with the 3 events in order."""
from _stream import run, session, stream, workdir, write_batches

import spark_ops

base = workdir("buffer")
write_batches(f"{base}/in", [
    [{"user": "ann", "page": "/a"}, {"user": "bob", "page": "/b"}, {"user": "ann", "page": "/c"}],
    [{"user": "ann", "page": "/d"}, {"user": "bob", "page": "/e"}],
    [{"user": "bob", "page": "/f"}, {"user": "ann", "page": "/g"}],
])
spark = session()
events = stream(spark, f"{base}/in", "user string, page string")
out = spark_ops.buffer(events, key="user", count=3, state=f"{base}/state")
run(out, base, show=lambda r: (r.user, [item.page for item in r["items"]]))

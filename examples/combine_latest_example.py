"""combine_latest: the latest bid and ask of every symbol, emitted whenever either changes."""
from _stream import run, session, stream, workdir, write_batches

import spark_ops

base = workdir("combine_latest")
write_batches(f"{base}/bids", [[{"sym": "ACME", "px": 10.0}], [{"sym": "ACME", "px": 10.5}], []])
write_batches(f"{base}/asks", [[], [{"sym": "ACME", "px": 11.0}], [{"sym": "ACME", "px": 10.8}]])
spark = session()
bids = stream(spark, f"{base}/bids", "sym string, px double")
asks = stream(spark, f"{base}/asks", "sym string, px double")
out = spark_ops.combine_latest({"bid": bids, "ask": asks}, key="sym", state=f"{base}/state")
run(out, base, show=lambda r: (r.sym, r.bid.px, r.ask.px))

"""The driver of the cluster test, run from the root as
``python -m tests.spark_ops.cluster_job <master url> <workdir> <s3 endpoint> <state url>``.

Runs ``session_window`` over <workdir>/src (one file per batch) on the standalone cluster with
state in S3, writes the foreachBatch sink files to <workdir>/out and, at the end,
<workdir>/executors.json: tasks run per executor id ("driver" included).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .spark_helpers import read_stream, run_stream

GAP_MS, DELAY = 1501, "500 ms"


def main() -> None:
    from pyspark.sql import SparkSession

    import spark_ops

    master, work, endpoint, state = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    aws = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL_S3": endpoint}
    builder = (SparkSession.builder.master(master).appName("spark-ops-cluster-test")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.memory", "512m")
               .config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
               .config("spark.cores.max", "2").config("spark.pyspark.python", sys.executable)
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    for k, v in aws.items():
        builder = builder.config(f"spark.executorEnv.{k}", v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    df = read_stream(spark, work / "src")
    out = spark_ops.session_window(df, "k", GAP_MS, event_time="ts", watermark=DELAY, state=state)
    run_stream(out, work / "out", work / "cp")
    execs = spark.sparkContext._jsc.sc().statusStore().executorList(True)     # the driver and the executors
    tasks = {str(execs.apply(i).id()): int(execs.apply(i).totalTasks()) for i in range(execs.size())}
    (work / "executors.json").write_text(json.dumps(tasks))
    spark.stop()


if __name__ == "__main__":
    main()

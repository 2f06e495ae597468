"""Helpers shared by the examples: a local Spark session, input files, running a query."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def session():
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("objectspace-example")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def workdir(name: str) -> str:
    path = os.path.join(tempfile.gettempdir(), "objectspace-examples", name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def write_batches(folder: str, batches: list[list[dict]]) -> None:
    """One JSON-lines file per micro-batch, admitted in order (the file source goes by mtime)."""
    os.makedirs(folder, exist_ok=True)
    for i, rows in enumerate(batches):
        path = os.path.join(folder, f"{i:04d}.json")
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))


def stream(spark, folder: str, schema: str):
    from pyspark.sql import functions as F
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(folder)
    return df.withColumn("ts", F.col("ts").cast("timestamp")) if "ts " in schema + " " else df


def run(df, base: str, show=lambda row: row.asDict(recursive=True)) -> None:
    """Run the query over every input file and print what each batch emitted."""
    def sink(batch_df, batch_id):
        for row in batch_df.collect():
            print(f"batch {batch_id}: {show(row)}")
    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", os.path.join(base, "checkpoint"))
         .trigger(availableNow=True).start())
    q.awaitTermination()

"""The shared fixtures work: a real S3 server over HTTP and a real Spark session."""
import pytest


@pytest.mark.s3
def test_s3_server_round_trip(s3_server):
    client = s3_server.client()
    client.put_object(Bucket=s3_server.bucket, Key="hello.txt", Body=b"world")
    assert client.get_object(Bucket=s3_server.bucket, Key="hello.txt")["Body"].read() == b"world"
    assert s3_server.endpoint.startswith("http://127.0.0.1:")


@pytest.mark.spark
def test_spark_session_runs_a_job(spark):
    assert spark.range(10).selectExpr("sum(id) AS s").collect()[0]["s"] == 45
    assert spark.sparkContext.master == "local[2]"

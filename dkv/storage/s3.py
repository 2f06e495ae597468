"""S3Store: objects in an S3 bucket under a prefix, through boto3.

Endpoint, region and credentials come from boto3's standard chain (environment,
``~/.aws``, instance roles, ``AWS_ENDPOINT_URL_S3``) unless given as options. Throttling,
5xx answers and dropped connections are retried with exponential backoff (boto3's
adaptive retry mode plus a retry loop of ours around connection errors). ``put_if_absent``
sends ``If-None-Match: *``, which S3 (and compatible servers) answer with 412 when the
object exists.
"""
from __future__ import annotations

import logging
import random
import time

from ..errors import ObjectMissingError, StorageError
from .base import ObjectStore, check_key

log = logging.getLogger(__name__)

_RETRYABLE_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                    "InternalError", "ServiceUnavailable", "503", "500", "ConditionalRequestConflict", "409"}


class S3Store(ObjectStore):
    """``s3://bucket/prefix``. Options: endpoint_url, region_name, aws_access_key_id,
    aws_secret_access_key, aws_session_token, max_attempts (default 8), client (a ready boto3 client)."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region_name: str | None = None, max_attempts: int = 8, client=None, **credentials) -> None:
        if not bucket:
            raise ValueError("S3 location needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.location = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.max_attempts = max_attempts
        if client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError as e:  # pragma: no cover - depends on the environment
                raise StorageError("s3:// locations need boto3: pip install 'objectspace[s3]'") from e
            cfg = Config(retries={"max_attempts": max_attempts, "mode": "adaptive"},
                         max_pool_connections=32, connect_timeout=10, read_timeout=60)
            session = boto3.session.Session(**{k: v for k, v in credentials.items() if v is not None})
            client = session.client("s3", endpoint_url=endpoint_url, region_name=region_name, config=cfg)
        self.client = client

    def parent(self):
        path = self.prefix.rstrip("/")
        if not path:
            return None
        up, _, name = path.rpartition("/")
        return S3Store(self.bucket, up, client=self.client, max_attempts=self.max_attempts), name

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _call(self, what: str, key: str, fn, *args, **kwargs):
        """Run one request, retrying what boto3 did not (connection drops, late throttles)."""
        from botocore.exceptions import BotoCoreError, ClientError

        delay = 0.05
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn(*args, **kwargs)
            except ClientError as e:
                code = str(e.response.get("Error", {}).get("Code", ""))
                if code in ("NoSuchKey", "404", "NotFound"):
                    raise ObjectMissingError(f"{self.location}/{key} does not exist") from None
                if code in ("PreconditionFailed", "412", "InvalidRange", "416"):
                    raise       # answers, not failures: the caller handles them
                if code not in _RETRYABLE_CODES or attempt == self.max_attempts:
                    raise StorageError(f"S3 {what} {self.location}/{key} failed: {e}") from e
            except BotoCoreError as e:
                if attempt == self.max_attempts:
                    raise StorageError(f"S3 {what} {self.location}/{key} failed: {e}") from e
            log.warning("S3 %s %s: retrying (attempt %d)", what, key, attempt)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def get(self, key, start=None, end=None):
        kwargs = {"Bucket": self.bucket, "Key": self._key(key)}
        if start is not None or end is not None:
            lo = start or 0
            if end is not None and end <= lo:
                return b""
            kwargs["Range"] = f"bytes={lo}-{'' if end is None else end - 1}"
        from botocore.exceptions import ClientError
        try:
            resp = self._call("get", key, self.client.get_object, **kwargs)
        except ClientError as e:  # InvalidRange: a start past the end of the object
            if e.response.get("Error", {}).get("Code") in ("InvalidRange", "416"):
                return b""
            raise StorageError(f"S3 get {self.location}/{key} failed: {e}") from e
        return resp["Body"].read()

    def put(self, key, data):
        self._call("put", key, self.client.put_object, Bucket=self.bucket, Key=self._key(key), Body=bytes(data))

    def get_many(self, keys):
        keys = list(keys)
        if len(keys) <= 1:
            return [self.get(k) for k in keys]
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(8, len(keys))) as pool:     # a round trip each: overlap them
            return list(pool.map(self.get, keys))

    def put_if_absent(self, key, data):
        from botocore.exceptions import ClientError
        try:
            self._call("put_if_absent", key, self.client.put_object, Bucket=self.bucket,
                       Key=self._key(key), Body=bytes(data), IfNoneMatch="*")
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                return False
            raise StorageError(f"S3 put_if_absent {self.location}/{key} failed: {e}") from e

    def list(self, prefix=""):
        out = []
        paginator = self.client.get_paginator("list_objects_v2")
        full = self.prefix + prefix
        pages = self._call("list", prefix, lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=full)))
        for page in pages:
            for obj in page.get("Contents", ()):
                out.append((obj["Key"][len(self.prefix):], obj["Size"]))
        out.sort()
        return out

    def delete(self, key):
        self._call("delete", key, self.client.delete_object, Bucket=self.bucket, Key=self._key(key))

    def delete_many(self, keys):
        keys = list(keys)
        for i in range(0, len(keys), 1000):
            chunk = [{"Key": self._key(k)} for k in keys[i:i + 1000]]
            self._call("delete", chunk[0]["Key"], self.client.delete_objects, Bucket=self.bucket,
                       Delete={"Objects": chunk, "Quiet": True})

    def size(self, key):
        try:
            resp = self._call("head", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        except ObjectMissingError:
            return None
        return resp["ContentLength"]

"""S3Store: objects in an S3 bucket under a prefix, through boto3.

Endpoint, region and credentials come from boto3's standard chain (environment,
``~/.aws``, instance roles, ``AWS_ENDPOINT_URL_S3``) unless given as options.
``put_if_absent`` sends ``If-None-Match: *``, which S3 (and compatible servers) answer with
412 when the object exists.

Retries, and who does them:

- botocore (``Config(retries={"mode": "standard", "total_max_attempts": max_attempts})``,
  with ``connect_timeout`` and ``read_timeout``) retries every request that failed before its
  answer was parsed: throttles (503 SlowDown, 429), 5xx answers, connection refused or reset,
  connect and read timeouts, with jittered exponential backoff (50 ms base for errors, 1 s for
  throttles) and a retry quota. Each ``list`` page is one request, so a fault on page 7
  retries page 7 (the continuation token is kept), not the listing.
- our own loop (``max_attempts`` rounds, jittered backoff from 50 ms) retries what botocore
  does not see or cannot judge:
  ``get``'s body read (a connection reset or a cut in the middle of the body, or a body
  shorter than its Content-Length or than the range asked for: such bytes are never
  returned); a transport error that escapes botocore's retry (e.g. a truncated XML answer);
  409 ConditionalRequestConflict of a conditional create;
  the 412 of a conditional create that botocore retried after a lost answer (read back,
  see ``put_if_absent``); and the per-key ``Errors`` of a quiet DeleteObjects.

When retries run out, the error is a ``StorageError`` naming the operation, the key and the
last answer (status and code, or the transport error). A store stays usable afterwards: it
keeps no state between calls other than the boto3 client.

Retries are counted: ``store.retries()`` gives ``{"botocore": n, "ours": m}`` for the store's
client (every request botocore sent again, seen on its ``before-send`` event as an attempt
after the first; and every round of our own loop), ``retry_totals()`` the same for the
whole process. With ``DKV_S3_RETRY_DIR`` set in its environment, a process also writes its
totals to ``<dir>/retries-<pid>.json`` after each retry (retries are rare: one small file
write each), so that a run of many processes, some of them killed, can add them up.
"""
from __future__ import annotations

import builtins
import http.client
import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from ..errors import ObjectMissingError, StorageError
from .base import ObjectStore, check_object_key

log = logging.getLogger(__name__)

_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound"}
_PRECONDITION = {"PreconditionFailed", "412"}
_INVALID_RANGE = {"InvalidRange", "416"}
_CONFLICT = {"ConditionalRequestConflict", "409"}


class _RetryCounter:
    """Retries of one boto3 client: botocore's (attempts after the first of a request) and
    our own loop's rounds."""

    def __init__(self) -> None:
        self.botocore = 0
        self.ours = 0

    def on_send(self, request: Any = None, **_kwargs: Any) -> None:
        context = getattr(request, "context", None) or {}
        if (context.get("retries") or {}).get("attempt", 1) > 1:
            with _COUNT_LOCK:
                self.botocore += 1
                _TOTALS["botocore"] += 1
            _saved()

    def ours_once(self) -> None:
        with _COUNT_LOCK:
            self.ours += 1
            _TOTALS["ours"] += 1
        _saved()

    def as_dict(self) -> dict[str, int]:
        with _COUNT_LOCK:
            return {"botocore": self.botocore, "ours": self.ours}


_COUNT_LOCK = threading.Lock()
_TOTALS = {"botocore": 0, "ours": 0}


def retry_totals() -> dict[str, int]:
    """``{"botocore": n, "ours": m}``: the retries of every S3Store of this process so far."""
    with _COUNT_LOCK:
        return dict(_TOTALS)


def _saved() -> None:
    folder = os.environ.get("DKV_S3_RETRY_DIR")
    if not folder:
        return
    try:
        path = os.path.join(folder, f"retries-{os.getpid()}.json")
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(retry_totals(), fh)
        os.replace(tmp, path)
    except OSError as e:
        log.debug("could not write the retry counts: %s", e)


def _counter(client: Any) -> _RetryCounter:
    """The retry counter of ``client``, made and hooked to its events the first time."""
    counter = getattr(client, "_dkv_retry_counter", None)
    if counter is None:
        counter = _RetryCounter()
        try:
            client.meta.events.register("before-send.s3", counter.on_send)
            client._dkv_retry_counter = counter
        except AttributeError:          # not a boto3 client (a test double): ours only
            pass
    return counter


def _answer(e: BaseException | None) -> str:
    """The last answer, for an error message: status and code of an S3 error, else the
    transport error."""
    response = getattr(e, "response", None)
    if isinstance(response, dict) and "Error" in response:
        err = response.get("Error", {})
        meta = response.get("ResponseMetadata", {})
        status = meta.get("HTTPStatusCode", "?")
        tries = meta.get("RetryAttempts")
        more = f" after {tries} retries by botocore" if tries else ""
        return f"HTTP {status} {err.get('Code', '?')}: {err.get('Message', '')}{more}"
    return f"{type(e).__name__}: {e}"


def _code(e: BaseException) -> str:
    response = getattr(e, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Errors of a read or of a half-received answer that botocore may let through."""
    from botocore.exceptions import BotoCoreError
    out = [BotoCoreError, OSError, http.client.HTTPException]
    try:
        import urllib3.exceptions
        out.append(urllib3.exceptions.HTTPError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(out)


class S3Store(ObjectStore):
    """``s3://bucket/prefix``. Options: endpoint_url, region_name, aws_access_key_id,
    aws_secret_access_key, aws_session_token, max_attempts (default 8: botocore's attempts per
    request, and our rounds for what it does not retry), connect_timeout (10 s), read_timeout
    (60 s), retry_delay (first backoff of our own loop, 50 ms), part_bytes (a whole object
    larger than this is read in ranged parts, up to 8 at once; 1 MiB; 0: one GET), client (a
    ready boto3 client, whose retry configuration is then its own)."""

    concurrent_reads = 8

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region_name: str | None = None, max_attempts: int = 8, client: Any = None,
                 connect_timeout: float = 10, read_timeout: float = 60, retry_delay: float = 0.05,
                 part_bytes: int = 1 << 20, **credentials: str | None) -> None:
        if not bucket:
            raise ValueError("S3 location needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.location = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.max_attempts = max(1, max_attempts)
        self.retry_delay = retry_delay
        self.part_bytes = part_bytes
        if client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError as e:  # pragma: no cover - depends on the environment
                raise StorageError("s3:// locations need boto3: pip install 'objectspace[s3]'") from e
            cfg = Config(retries={"total_max_attempts": self.max_attempts, "mode": "standard"},
                         max_pool_connections=32, connect_timeout=connect_timeout,
                         read_timeout=read_timeout)
            session = boto3.session.Session(**{k: v for k, v in credentials.items() if v is not None})
            client = session.client("s3", endpoint_url=endpoint_url, region_name=region_name, config=cfg)
        self.client = client
        self._retries = _counter(client)
        self._transport = _transport_errors()

    def retries(self) -> dict[str, int]:
        """``{"botocore": n, "ours": m}``: requests botocore sent again, and rounds of our own
        loop, on this store's client so far (stores sharing a client share the counts)."""
        return self._retries.as_dict()

    def parent(self) -> tuple[ObjectStore, str] | None:
        path = self.prefix.rstrip("/")
        if not path:
            return None
        up, _, name = path.rpartition("/")
        return S3Store(self.bucket, up, client=self.client, max_attempts=self.max_attempts,
                       retry_delay=self.retry_delay, part_bytes=self.part_bytes), name

    def _key(self, key: str) -> str:
        return self.prefix + check_object_key(key)

    def _fail(self, what: str, key: str, last: BaseException | str | None, attempts: int | None = None) -> StorageError:
        answer = last if isinstance(last, str) else _answer(last)
        rounds = f" ({attempts} attempts)" if attempts and attempts > 1 else ""
        return StorageError(f"S3 {what} {self.location}/{key} failed{rounds}; last answer: {answer}")

    def _backoff(self, what: str, key: str, attempt: int, last: BaseException | str | None) -> None:
        answer = last if isinstance(last, str) else _answer(last)
        self._retries.ours_once()
        log.warning("S3 %s %s: retrying (attempt %d): %s", what, key, attempt, answer)
        delay = min(self.retry_delay * (2 ** (attempt - 1)), 5.0)
        time.sleep(delay * (0.5 + random.random()))

    def _call(self, what: str, key: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One request. botocore retried throttles, 5xx and dropped connections already;
        retried here: a transport error that escaped it (an answer cut short), and 409
        ConditionalRequestConflict. 404 → ObjectMissingError; 412 and 416 are answers
        (ClientError, for the caller); anything else → StorageError."""
        from botocore.exceptions import ClientError

        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn(*args, **kwargs)
            except ClientError as e:
                code = _code(e)
                if code in _NOT_FOUND_CODES:
                    raise ObjectMissingError(f"{self.location}/{key} does not exist") from None
                if code in _PRECONDITION or code in _INVALID_RANGE:
                    raise       # answers, not failures: the caller handles them
                if code not in _CONFLICT or attempt == self.max_attempts:
                    raise self._fail(what, key, e) from e
                last = e
            except self._transport as e:
                if not _escaped_botocore(e) or attempt == self.max_attempts:
                    raise self._fail(what, key, e, attempt) from e
                last = e
            self._backoff(what, key, attempt, last)
        raise AssertionError("unreachable")

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """The object's bytes, read inside the retry loop: a connection lost in the middle of
        the body, or a body shorter than its Content-Length or than the range asked for, is
        retried, and after ``max_attempts`` rounds is a StorageError; never returned.

        A whole object larger than ``part_bytes`` (1 MiB) is read in parts of that size,
        up to 8 at once, each a ranged GET with its own retries: the first part's answer
        gives the size, so an object within one part costs one request as before. (A
        restart that touches every table of a big state reads them at the network's
        bandwidth rather than one round trip's.)"""
        if start is None and end is None and self.part_bytes:
            return self._get_in_parts(key)
        return self._read(key, start, end)[0]

    def get_sized(self, key: str, start: int | None = None, end: int | None = None) -> tuple[bytes, int | None]:
        """``get``, and the object's size from the answer's Content-Range (one request)."""
        if start is None and end is None:
            data = self.get(key)
            return data, len(data)
        return self._read(key, start, end)

    def prefetch(self, key: str, ranges: builtins.list[tuple[int, int]],
                 size: int | None = None) -> builtins.list[bytes]:
        """The ranges' bytes, ``concurrent_reads`` (8) requests at once, each with its own
        retries (a round trip each: overlapped, eight cost about one)."""
        def read(r: tuple[int, int]) -> bytes:
            return self._read(key, r[0], r[1])[0]
        if len(ranges) < 2:
            return [read(r) for r in ranges]
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(self.concurrent_reads, len(ranges))) as pool:
            return list(pool.map(read, ranges))

    def _get_in_parts(self, key: str) -> bytes:
        part = self.part_bytes
        first, total = self._read(key, 0, part, whole=True)
        if total is None or len(first) >= total:
            return first
        rest = self.prefetch(key, [(lo, min(lo + part, total)) for lo in range(len(first), total, part)])
        data = b"".join([first, *rest])
        if len(data) != total:      # the object changed size between the parts: not an immutable object
            raise StorageError(f"S3 get {self.location}/{key}: read {len(data)} bytes in parts of an object "
                               f"of {total} (it changed while being read)")
        return data

    def _read(self, key: str, start: int | None, end: int | None, whole: bool = False) -> tuple[bytes, int | None]:
        """(bytes of ``[start, end)``, the object's size when the answer says it). ``whole``:
        the range is the first part of a read of the whole object, which a server may
        answer with all of it (200, no Content-Range)."""
        kwargs = {"Bucket": self.bucket, "Key": self._key(key)}
        lo = None
        if start is not None or end is not None:
            lo = start or 0
            if end is not None and end <= lo:
                return b"", None
            kwargs["Range"] = f"bytes={lo}-{'' if end is None else end - 1}"
        from botocore.exceptions import ClientError
        last: str | None = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                resp = self._call("get", key, self.client.get_object, **kwargs)
            except ClientError as e:  # InvalidRange: a start past the end of the object
                if _code(e) in _INVALID_RANGE:
                    return b"", 0 if whole else None
                raise self._fail("get", key, e) from e
            try:
                data: bytes = resp["Body"].read()
            except self._transport as e:
                last = f"body read failed: {type(e).__name__}: {e}"
            else:
                m = re.match(r"bytes \d+-\d+/(\d+)", resp.get("ContentRange") or "")
                total: int | None
                if whole and m is None:       # the whole object, unasked for a range: as a plain GET
                    last = self._short(resp, data, None, None)
                    total = len(data)
                else:
                    last = self._short(resp, data, lo, end)
                    total = int(m.group(1)) if m else None
                if last is None:
                    return data, total
            finally:
                try:
                    resp["Body"].close()
                except Exception:   # noqa: BLE001 - closing a broken stream
                    pass
            if attempt < self.max_attempts:
                self._backoff("get", key, attempt, last)
        raise self._fail("get", key, last, self.max_attempts)

    @staticmethod
    def _short(resp: Any, data: bytes, lo: int | None, end: int | None) -> str | None:
        """Why ``data`` is not the whole answer, or None if it is."""
        expected = resp.get("ContentLength")
        if expected is not None and len(data) != expected:
            return f"short body: {len(data)} of {expected} bytes (Content-Length)"
        if lo is None:
            return None
        m = re.match(r"bytes (\d+)-(\d+)/(\d+|\*)", resp.get("ContentRange") or "")
        if m is None:
            # No Content-Range: the server sent the whole object (a 200 to a range request).
            return None if lo == 0 and end is None else (
                f"range bytes={lo}-{'' if end is None else end - 1} answered without Content-Range")
        first, last_byte = int(m.group(1)), int(m.group(2))
        total = None if m.group(3) == "*" else int(m.group(3))
        if first != lo or len(data) != last_byte - first + 1:
            return f"range answer {resp.get('ContentRange')} with {len(data)} bytes for bytes={lo}-"
        want_end = end if total is None else (total if end is None else min(end, total))
        if want_end is not None and last_byte + 1 != want_end:
            return f"range answer {resp.get('ContentRange')} short of byte {want_end}"
        return None

    def put(self, key: str, data: bytes) -> None:
        self._call("put", key, self.client.put_object, Bucket=self.bucket, Key=self._key(key), Body=bytes(data))

    def get_many(self, keys: Iterable[str]) -> builtins.list[bytes]:
        keys = list(keys)
        if len(keys) <= 1:
            return [self.get(k) for k in keys]
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(8, len(keys))) as pool:     # a round trip each: overlap them
            return list(pool.map(self.get, keys))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``If-None-Match: *``; True if this call created it.

        A 412 does not by itself mean that another writer was first: botocore retries a
        conditional PUT whose answer was lost (connection reset, read timeout), and if the
        first attempt was applied, the retry finds the object there and gets 412. So on 412
        the object is read back and compared with ``data``: equal bytes mean this writer's
        object is the one stored, and the answer is True. (dkv's manifests name their
        writer, so another writer's object never has the same bytes.) A StorageError means
        the outcome is unknown: the object may or may not have been created."""
        from botocore.exceptions import ClientError
        data = bytes(data)
        try:
            self._call("put_if_absent", key, self.client.put_object, Bucket=self.bucket,
                       Key=self._key(key), Body=data, IfNoneMatch="*")
            return True
        except ClientError as e:
            if _code(e) not in _PRECONDITION:
                raise self._fail("put_if_absent", key, e) from e
            first = e
        try:
            stored = self.get(key)
        except ObjectMissingError:
            return False        # there at the 412, deleted since: not ours to claim
        except StorageError as e:
            raise StorageError(f"S3 put_if_absent {self.location}/{key}: got 412 ({_answer(first)}) "
                               f"and could not read the object back to see whose it is: {e}") from e
        if stored == data:
            log.info("S3 put_if_absent %s: 412 on a retry, and the object is ours", key)
            return True
        return False

    def list(self, prefix: str = "") -> builtins.list[tuple[str, int]]:
        """Every ``(key, size)`` under ``prefix``, a page (1000 keys) per request; a failed
        page is retried with its continuation token, not the listing from its start."""
        out = []
        full = self.prefix + prefix
        kwargs = {"Bucket": self.bucket, "Prefix": full}
        while True:
            page = self._call("list", prefix, self.client.list_objects_v2, **kwargs)
            for obj in page.get("Contents", ()):
                out.append((obj["Key"][len(self.prefix):], obj["Size"]))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                break
            kwargs["ContinuationToken"] = token
        out.sort()
        return out

    def delete(self, key: str) -> None:
        self._call("delete", key, self.client.delete_object, Bucket=self.bucket, Key=self._key(key))

    def delete_many(self, keys: Iterable[str]) -> None:
        """Quiet DeleteObjects of up to 1000 keys a request. S3 answers 200 with per-key
        ``Errors`` for the keys it did not delete: those keys are sent again (our loop,
        ``max_attempts`` rounds), and if some still fail, StorageError names them with
        their last error. A key that does not exist is not an error."""
        keys = list(keys)
        for i in range(0, len(keys), 1000):
            pending = keys[i:i + 1000]
            for attempt in range(1, self.max_attempts + 1):
                chunk = [{"Key": self._key(k)} for k in pending]
                resp = self._call("delete_many", pending[0], self.client.delete_objects,
                                  Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})
                failed = {}
                for err in resp.get("Errors", ()) or ():
                    if err.get("Code") in _NOT_FOUND_CODES:
                        continue
                    name = err.get("Key", "")
                    name = name[len(self.prefix):] if name.startswith(self.prefix) else name
                    failed[name] = f"{err.get('Code', '?')}: {err.get('Message', '')}"
                if not failed:
                    break
                pending = [k for k in pending if k in failed] or sorted(failed)
                last = "; ".join(f"{k}: {v}" for k, v in sorted(failed.items()))
                if attempt == self.max_attempts:
                    shown = ", ".join(sorted(failed)[:10]) + (" ..." if len(failed) > 10 else "")
                    raise StorageError(f"S3 delete_many {self.location}: {len(failed)} key(s) not deleted "
                                       f"after {attempt} attempts: {shown}; last answer: {last[:2000]}")
                self._backoff("delete_many", pending[0], attempt, last)

    def size(self, key: str) -> int | None:
        try:
            resp = self._call("head", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        except ObjectMissingError:
            return None
        return cast(int, resp["ContentLength"])


def _escaped_botocore(e: BaseException) -> bool:
    """A transport error that botocore's retry did not handle: an answer cut short while
    botocore read it (urllib3/http.client errors raised from the parse), or a body stream
    error. Connection errors that botocore retried (and gave up on) are not retried again."""
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError, IncompleteReadError, ResponseStreamingError
    if isinstance(e, (BotoConnectionError, HTTPClientError)):
        return False
    escaped = [OSError, http.client.HTTPException, IncompleteReadError, ResponseStreamingError]
    try:
        import urllib3.exceptions
        escaped.append(urllib3.exceptions.HTTPError)
    except ImportError:  # pragma: no cover
        pass
    return isinstance(e, tuple(escaped))

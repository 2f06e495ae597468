"""The driver's check of a query's operators when a run starts (RFC 0010, decision 2).

``apply_operator`` names the function that ``mapInArrow`` runs ``spark_ops_op_<tag>`` and
remembers here what the tag stands for (state root, name, identity, ``retire=``). Spark calls
``StreamingQueryListener.onQueryStarted`` synchronously before a run's first batch; the
listener reads the tags in the query's plan — exactly the operators this run has — and each
state root's ledger for the query, decides the run's verdict (``_identity.decide``) and
writes it where the run's tasks read it before they open a shard. A run whose code and state
disagree therefore fails in its first batch with the verdict's message, before any state is
read or written.

Classic Spark only: a Spark Connect client has no driver listener of its own (its listeners
run on the server), and its tasks check what they can (``_identity.check_run``).
"""
from __future__ import annotations

import logging
import re
import threading
import time
import uuid

from . import _identity

log = logging.getLogger(__name__)

PREFIX = "spark_ops_op_"
_TAG = re.compile(PREFIX + r"([0-9a-f]{16})")
_APPLIED: dict = {}         # tag -> Applied
_SESSIONS: dict = {}        # id(JVM session) -> the listener registered on it
_LOCK = threading.Lock()


class Applied:
    """What one ``apply_operator`` call put in a plan."""

    __slots__ = ("root", "name", "identity", "retire", "options")

    def __init__(self, root: str, name: str, identity: dict, retire: tuple, options: dict) -> None:
        self.root, self.name, self.identity, self.retire, self.options = root, name, identity, retire, options


def remember(root: str, name: str, identity: dict, retire: tuple, options: dict) -> str:
    """Note an operator applied in this driver; returns the tag its function is named by."""
    tag = uuid.uuid4().hex[:16]
    with _LOCK:
        _APPLIED[tag] = Applied(root, name, identity, tuple(retire), dict(options))
    return tag


def function_name(tag: str) -> str:
    return PREFIX + tag


def is_classic(session) -> bool:
    return not type(session).__module__.startswith("pyspark.sql.connect")


def ensure_listener(session) -> bool:
    """Register the listener on ``session`` once (classic sessions only); False when none
    can run (Spark Connect)."""
    if not is_classic(session):
        return False
    try:
        key = id(session._jsparkSession)
    except Exception:       # noqa: BLE001 - not a classic session after all
        return False
    with _LOCK:
        if key in _SESSIONS:
            return True
        from py4j.java_gateway import java_import
        from pyspark import SparkContext
        from pyspark.java_gateway import ensure_callback_server_started
        gw = SparkContext._gateway
        java_import(gw.jvm, "org.apache.spark.sql.streaming.*")
        ensure_callback_server_started(gw)
        listener = gw.jvm.PythonStreamingQueryListenerWrapper(_Listener(session))
        session._jsparkSession.streams().addListener(listener)
        _SESSIONS[key] = listener
    return True


class _Listener:
    """The JVM's ``PythonStreamingQueryListener``, implemented here rather than through
    pyspark's StreamingQueryListener: that one turns every event into Python objects with a
    py4j call per field before it calls the listener, tens of calls per batch of every query
    of the session on the driver; this one reads two fields of a start and ignores the rest.
    Decides each run's verdict before its first batch (see the module docstring)."""

    def __init__(self, session) -> None:
        self.session = session

    def onQueryStarted(self, jevent):
        query = run = None
        try:
            query, run = jevent.id().toString(), jevent.runId().toString()
            on_start(self.session, query, run)
        except Exception as e:  # noqa: BLE001 - never break the query; its tasks check what they can
            log.warning("spark_ops: could not check the operators of query %s at its start (%s); its tasks "
                        "check what they can", query, e)

    def onQueryProgress(self, jevent):
        pass

    def onQueryIdle(self, jevent):
        pass

    def onQueryTerminated(self, jevent):
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def plan_of(session, query_id: str) -> str:
    """The analysed logical plan of a started query, as text (it names the query's Python
    functions)."""
    q = session.streams.get(query_id)
    if q is None:
        raise LookupError(f"query {query_id} is not active")
    execution = q._jsq.streamingQuery()
    try:
        return execution.analyzedPlan().toString()
    except Exception:       # noqa: BLE001 - older or newer internals: the logical plan says the same
        return execution.logicalPlan().toString()


def on_start(session, query_id: str, run: str) -> None:
    t0 = time.perf_counter()
    tags = set(_TAG.findall(plan_of(session, query_id)))
    with _LOCK:
        applied = [_APPLIED[t] for t in tags if t in _APPLIED]
    verdicts = decide_run(applied, query_id, run)
    log.info("spark_ops: run %s of query %s checked in %.0f ms: %s", run, query_id, (time.perf_counter() - t0) * 1000,
             {root: v.error is None for root, v in verdicts.items()})


def decide_run(applied: list, query_id: str, run: str) -> dict:
    """Decide and write the verdict of run ``run`` of query ``query_id`` whose operators are
    ``applied``, per state root; returns ``{root: Verdict}``."""
    by_root: dict = {}
    for a in applied:
        by_root.setdefault(a.root, []).append(a)
    out = {}
    for root, ops in by_root.items():
        qd = _identity.QueryDir(root, query_id, ops[0].options)
        planned, dup = {}, []
        for a in ops:
            if a.name in planned and planned[a.name] != a.identity:
                dup.append(a.name)
            planned[a.name] = a.identity
        retire = {n for a in ops for n in a.retire}
        if dup:
            v = _identity.Verdict(run, sorted(planned))
            v.error = _identity.stop_message(qd, [f"Two operators of this query are both named {n!r}: they would share one "
                                           f"state. Give each its own name= (an operator's name is its class "
                                           f"name, lowercased, unless name= fixes it)." for n in sorted(set(dup))])
        else:
            v = _identity.decide(qd, run, planned, retire)
        _identity.write_verdict(qd, v)
        if v.error:
            log.error("%s", v.error)
        out[root] = v
    return out

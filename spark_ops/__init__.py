"""spark_ops: custom stateful PySpark operators whose state lives in object spaces on dkv.

    from spark_ops import buffer
    out = buffer(events, key="user", count=100, state="./state")

Each shard keeps its key groups' state in a dkv instance, saves only the slots that
changed, and checkpoints with epoch = Spark batch id, so a re-run batch starts again from
the previous batch's state (exactly-once state with a replayable source). See
docs/spark_ops.md and docs/rfcs/0001-spark-runtime.md.
"""
from __future__ import annotations

from dkv import __version__ as __version__     # one version for the three packages

import objectspace as _objectspace

from . import _layout
from ._api import buffer, combine_latest, delay, session_window, timeout
from ._inspect import read_operators, read_timers, read_vars
from ._metrics import read_metrics, snapshot_bytes
from ._output import UnknownKeyError
from ._plan import apply_operator
from ._progress import metrics_listener, progress_metrics
from ._runs import StaleRunError
from ._timers import Timer
from ._statevar import StateVar
from .datasource import register_datasource
from .errors import EpochGapError, NoStateError, SparkOpsError, StateMismatchError
from .operator import Context, Operator

_objectspace.register_family_rule(_layout.FAMILY_RULE)     # inspection knows operators' shards

__all__ = ["buffer", "combine_latest", "delay", "timeout", "session_window", "apply_operator",
           "Operator", "Context", "Timer", "read_metrics", "read_timers", "snapshot_bytes",
           "register_datasource", "metrics_listener", "progress_metrics", "StaleRunError",
           "UnknownKeyError", "StateVar", "SparkOpsError", "NoStateError", "StateMismatchError", "EpochGapError",
           "read_operators", "read_vars"]

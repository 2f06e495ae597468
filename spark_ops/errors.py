"""Exceptions raised by spark_ops: one root, and subclasses that say what to do.

Each inherits the builtin it is a case of, so code that caught that builtin before still
catches it.
"""
from __future__ import annotations


class SparkOpsError(Exception):
    """Root of every error spark_ops raises on purpose."""


class NoStateError(SparkOpsError, ValueError):
    """A location holds no spark_ops state: no query under a state root, or not the query
    or operator asked for. The message names the location."""


class StateMismatchError(SparkOpsError, ValueError):
    """The query's code and its state disagree: an operator or a state variable the state
    holds is not in the code (renamed, removed), a name that was retired came back, a
    variable changed kind without a migration, or stored values are of a newer version than
    the code reads. Raised before any state is read or written; the message names the
    operator or variable and the argument or command that resolves it (docs/spark_ops.md,
    *Evolving an operator and its state*)."""


class EpochGapError(StateMismatchError):
    """A shard's newest checkpoint is older than the batch before the one it runs: batches
    ran without this state (under another name, or with the operator removed). Continuing
    would skip their input, so the shard refuses; the message says how to go on."""


__all__ = ["SparkOpsError", "NoStateError", "StateMismatchError", "EpochGapError"]

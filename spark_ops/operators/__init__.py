"""Built-in operators, written with the public Operator API (see spark_ops.operator)."""
from ._buffer import Buffer
from ._combine import CombineLatest
from ._timed import Delay, SessionWindow, Timeout

__all__ = ["Buffer", "CombineLatest", "Delay", "Timeout", "SessionWindow"]

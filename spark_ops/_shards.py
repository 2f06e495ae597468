"""Shards and key groups: which Spark partition runs which key groups.

An operator's state has G key groups (default 256). Spark computes each row's key group
as ``pmod(hash(key columns), G)`` (Murmur3, seed 42, so Python never has to agree with
Spark on hashing user values). Shard ``s`` of ``n`` owns the contiguous key-group range
``[s*G//n, (s+1)*G//n)``.

Spark routes rows by ``pmod(hash(partition column), n)``. To make shard ``s`` land in
partition ``s`` we route by a *token*: a small integer ``t_s`` with
``pmod(hash(t_s), n) == s``, found with a Python port of Spark's Murmur3 ``hashLong``
(pinned against Spark by a test).
"""
from __future__ import annotations

C1, C2, SEED = 0xCC9E2D51, 0x1B873593, 42
M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


def _mix_k1(k1: int) -> int:
    k1 = (k1 * C1) & M32
    k1 = _rotl(k1, 15)
    return (k1 * C2) & M32


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & M32


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & M32
    h1 ^= h1 >> 16
    return h1


def spark_hash_long(value: int, seed: int = SEED) -> int:
    """Spark's ``hash(<bigint>)``: Murmur3_x86_32.hashLong, as a signed 32-bit int."""
    v = value & 0xFFFFFFFFFFFFFFFF
    h1 = _mix_h1(seed & M32, _mix_k1(v & M32))
    h1 = _mix_h1(h1, _mix_k1(v >> 32))
    h = _fmix(h1, 8)
    return h - (1 << 32) if h & 0x80000000 else h


def pmod(a: int, n: int) -> int:
    r = a % n
    return r


def tokens(n: int) -> list[int]:
    """``t[s]`` with ``pmod(hash(t[s]), n) == s`` for every shard ``s`` in ``range(n)``."""
    out: dict[int, int] = {}
    t = 0
    while len(out) < n:
        s = pmod(spark_hash_long(t), n)
        out.setdefault(s, t)
        t += 1
    return [out[s] for s in range(n)]


def shard_range(shard: int, n: int, groups: int) -> tuple[int, int]:
    """Key groups ``[first, end)`` owned by ``shard`` of ``n``."""
    if not 0 <= shard < n:
        raise ValueError(f"shard {shard} out of range for {n} shards")
    return shard * groups // n, (shard + 1) * groups // n


def shard_of(key_group: int, n: int, groups: int) -> int:
    """The shard owning ``key_group``: the inverse of ``shard_range``."""
    return ((key_group + 1) * n - 1) // groups


# The columns a routed frame carries to the operator's stage: the key group, and the token
# that repartition(n, token) sends to the key group's shard (see route).
KG, TOKEN = "__spark_ops_kg", "__spark_ops_token"


def route(df, keys: list, key_groups: int, n: int):
    """``df`` with the key-group column ``pmod(hash(keys), G)`` and the token that sends each
    key group to its shard's partition under ``repartition(n, token)`` (RFC 0001, §2.1). The
    input and an initial-state frame (_initial.py) are routed by this one function."""
    from pyspark.sql import functions as F
    shard = F.expr(f"((`{KG}` + 1) * {n} - 1) div {key_groups}")
    return (df.withColumn(KG, F.pmod(F.hash(*[F.col(k) for k in keys]), F.lit(key_groups)))
              .withColumn(TOKEN, F.element_at(F.array(*[F.lit(t).cast("long") for t in tokens(n)]),
                                              (shard + 1).cast("int"))))

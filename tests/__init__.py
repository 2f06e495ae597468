"""The tests are packages (tests, tests.dkv, tests.objectspace, tests.spark_ops): pytest imports a
test module by its package name (``tests.dkv.test_api``) with the repository's root on sys.path,
test modules import their helpers relatively (``from .dkv_helpers import SMALL``), and the helper
scripts run as ``python -m tests.dkv.writer_process`` from the root. Spark's Python workers and
the shard hosts import pickled test functions by the same names."""

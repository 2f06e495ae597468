"""Build configuration beyond pyproject.toml: the optional C helpers (RFC 0005, RFC 0012).

* ``dkv.format._native`` (dkv/format/_native.c): front coding and bloom filters, the twin of
  dkv/format/_front.py and dkv/format/bloom.py, and ``DB.get``'s read (dkv/_getpath.py);
* ``objectspace._native`` (objectspace/_native.c): the msgpack value codec, the twin of
  objectspace/_codec.py's.

``optional=True``: without a C compiler the package installs anyway and uses the pure-Python
twins, which write and read the same bytes (tests hold both to it; ``OBJECTSPACE_NATIVE=0``
runs the Python ones with the C ones built).
"""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension("dkv.format._native", ["dkv/format/_native.c"], optional=True),
    Extension("objectspace._native", ["objectspace/_native.c"], optional=True),
])

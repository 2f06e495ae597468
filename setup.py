"""Build configuration beyond pyproject.toml: dkv's optional C helpers (dkv/format/_native.c).

``optional=True``: without a C compiler the package installs anyway and dkv uses the
pure-Python twin of the codec (dkv/format/_front.py), which writes and reads the same bytes.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("dkv.format._native", ["dkv/format/_native.c"], optional=True)])

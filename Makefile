# The two commands a newcomer needs: `make demo` and `make test`.
RUN := scripts/env.sh
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: setup demo test test-python test-all lint redis bench clean

setup:
	@scripts/setup_env.sh

demo: setup
	$(RUN) python examples/demo.py

# The fast suite: tests/dkv and tests/objectspace under coverage.py (branch), the rest without it,
# tests/objectspace once more on the pure-Python codec (OBJECTSPACE_NATIVE=0: the reference of
# the C twin, RFC 0012), then each of dkv and objectspace is held to a floor that only rises
# (scripts/coverage_floor.py, scripts/coverage-floor.json). With PYTEST_ARGS: plain pytest.
test: setup
ifeq ($(strip $(PYTEST_ARGS)),)
	$(RUN) python scripts/coverage_floor.py run
	$(RUN) python -m pytest -m "not slow" --ignore=tests/dkv --ignore=tests/objectspace
	OBJECTSPACE_NATIVE=0 $(RUN) python -m pytest -m "not slow" tests/objectspace
	$(RUN) python scripts/coverage_floor.py
else
	$(RUN) python -m pytest -m "not slow" $(PYTEST_ARGS)
endif

# The pure-Python path (the reference of the C twins, RFC 0012) with the C twins built: the
# fast suite (or PYTEST_ARGS) with OBJECTSPACE_NATIVE=0. `make test` runs tests/objectspace so.
test-python: setup
	OBJECTSPACE_NATIVE=0 $(RUN) python -m pytest -m "not slow" $(PYTEST_ARGS)

# ruff (pyflakes, pycodestyle, bugbear; pyproject.toml [tool.ruff]) and mypy held to a ratchet
# (scripts/typecheck.py): CI runs both before the tests.
lint: setup
	$(RUN) python -m ruff check .
	$(RUN) python scripts/typecheck.py

test-all: setup redis
	$(RUN) python -m pytest $(PYTEST_ARGS)

# The stream's differential test needs a redis-server 7 (Debian's package); `make test`
# runs its short version when one is on PATH and says that it skipped when not.
redis:
	@command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get install -y -q redis-server >/dev/null; } || echo "make: no redis-server (apt-get install redis-server): its tests will skip"

bench:
	@EXTRAS=s3,spark,dev,demo,bench scripts/setup_env.sh
	$(RUN) python benchmarks/run_all.py $(BENCH_ARGS)

clean:
	rm -rf .venv demo-output .pytest_cache build/coverage

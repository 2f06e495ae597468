# The two commands a newcomer needs: `make demo` and `make test`.
RUN := scripts/env.sh
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: setup demo test test-all bench clean

setup:
	@scripts/setup_env.sh

demo: setup
	$(RUN) python examples/demo.py

test: setup
	$(RUN) python -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: setup
	$(RUN) python -m pytest $(PYTEST_ARGS)

bench:
	@EXTRAS=s3,spark,dev,bench scripts/setup_env.sh
	$(RUN) python benchmarks/run_all.py $(BENCH_ARGS)

clean:
	rm -rf .venv demo-output .pytest_cache

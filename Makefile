# alance developer tasks. `make test` / `make demo` set up .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv demo demo-async test soak protos protos-check lint typecheck bench bench-spark clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# .ci/constraints.txt pins every dependency to the versions last run green: a fresh machine
# resolves in one pass instead of backtracking through old releases.
$(VENV)/.installed: pyproject.toml .ci/constraints.txt | $(BIN)/python
	$(BIN)/pip install --quiet -c .ci/constraints.txt -e ".[dev]"
	touch $@

venv: $(VENV)/.installed

# The main job: the Spark pipeline (PySpark local[2] -> alance dataset in a temp dir).
demo: venv
	$(BIN)/python examples/spark_pipeline.py

# The same story without Spark: async alance only.
demo-async: venv
	$(BIN)/python examples/pipeline.py

test: venv
	$(BIN)/python -m pytest -q

# Long reliability runs (excluded from `make test`): the damaged-file fuzzer and SIGKILLed
# writers, many more cases than the suite's. ALANCE_SOAK_EXAMPLES / ALANCE_SOAK_ROUNDS scale them.
soak: venv
	$(BIN)/python -m pytest -q -s -m soak tests/test_fuzz.py tests/test_kill_writers.py

protos: venv
	$(BIN)/python protos/generate.py

protos-check: venv
	$(BIN)/python protos/generate.py --check

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: venv
	$(BIN)/python benchmarks/compare_pylance.py

# Parquet vs alance on a standalone cluster (1 master, 1 worker) started from PySpark.
bench-spark: venv
	$(BIN)/python benchmarks/spark_write.py --cluster --rows 1000000

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

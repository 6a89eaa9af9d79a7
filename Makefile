# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUN    := .run

.PHONY: install test lint typecheck run stop bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check app retry delay storage devbroker pipeline tests bench
	$(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) $(RUN) .pytest_cache .ruff_cache .mypy_cache

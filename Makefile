# mlsched: `make run` serves the embedded all-in-one server; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
TEST_DATABASE_URL ?= postgresql://postgres:postgres@127.0.0.1:5432/mlsched
TEST_REDIS_URL ?= redis://127.0.0.1:6379/0
TEST_ENV = DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) SECRET_KEY=mlsched-test-key
# The main suite runs in this many processes, each with its own test database and Redis databases
# (tests/worker_env.py).
TEST_WORKERS ?= 2
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

.PHONY: run test check services install clean

$(BIN)/.installed: requirements.txt constraints.txt
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  echo "python3-venv is missing: installing it with apt-get"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq python3-venv >/dev/null; \
	  rm -rf $(VENV); $(PYTHON) -m venv $(VENV); }
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt -c constraints.txt
	@touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/python manage.py run_embedded --port $(PORT)

services:
	@scripts/services.sh
	@scripts/browser.sh

# The browser tests run in pytest processes of their own, after the rest: Playwright's event loop
# would break the asyncio tests that follow it in the same process.
test: install services
	$(TEST_ENV) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) tests --ignore=tests/e2e
	$(TEST_ENV) $(BIN)/pytest -q -n $(TEST_WORKERS) tests/e2e

check: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python manage.py makemigrations --check --dry-run

clean:
	rm -rf $(VENV) var

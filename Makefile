# Manifold. `make run` serves config.example.yaml; `make test` runs every test.
GO        ?= go
BIN       := bin/manifold
CONFIG    ?= config.example.yaml
TEST_FLAGS ?= -race -count=1 -timeout 20m

SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: build run test vet deps conformance fuzz bench clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN) ./cmd/manifold

run: build
	$(BIN) serve --config $(CONFIG)

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

# The cache tests start their own redis-server processes; install it if missing.
deps:
	@command -v redis-server >/dev/null || { echo "installing redis-server"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server >/dev/null; }

# The legacy-client tests run the TypeScript SDK v1 client on Node 22,
# which scripts/node-deps installs into .cache/node on first use.
test: vet build deps
	eval "$$(scripts/node-deps)" && export MANIFOLD_NODE MANIFOLD_NODE_MODULES && $(GO) test $(TEST_FLAGS) ./...

conformance: build
	scripts/conformance

# Every fuzz target for FUZZTIME (default 10s); CI runs it.
fuzz:
	scripts/fuzz

bench: build deps
	$(GO) test -run '^$$' -bench . -benchtime 3s -count 3 ./test/

clean:
	rm -rf bin

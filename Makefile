# Manifold. `make run` serves config.example.yaml; `make test` runs every test.
GO        ?= go
BIN       := bin/manifold
CONFIG    ?= config.example.yaml
TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: build run test vet fmt conformance bench clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN) ./cmd/manifold

run: build
	$(BIN) serve --config $(CONFIG)

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

test: vet build
	$(GO) test $(TEST_FLAGS) ./...

conformance: build
	scripts/conformance

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 3s -count 1 ./test/

clean:
	rm -rf bin

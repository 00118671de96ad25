# Manifold as a container: a static binary on a distroless base, run as a
# non-root user. The same build as `make build`.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t manifold .
#   docker run -p 8080:8080 -v $PWD/prod.yaml:/etc/manifold/config.yaml:ro manifold
#
# The mounted config must listen on 0.0.0.0:8080 (the default is loopback
# only) and name the Host values clients use in allowed_hosts. With
# admin.listen: 0.0.0.0:9090, probes and Prometheus use port 9090.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags="-s -w -X github.com/manifold-mcp/manifold/internal/mcp.BuildVersion=${VERSION}" \
    -o /out/manifold ./cmd/manifold

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/manifold /usr/local/bin/manifold
USER nonroot:nonroot
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/manifold", "serve", "--config", "/etc/manifold/config.yaml"]

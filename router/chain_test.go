package router

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/manifold-mcp/manifold/internal/telemetry"
)

// carriesContext knows every field of the propagators the process
// installs that starts a context on its own (tracestate only goes with a
// traceparent): one installed later that reads another field would be
// skipped by it, silently.
func TestCarriesContextKnowsThePropagators(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	prev := otel.GetTextMapPropagator()
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	stop, err := telemetry.Start(context.Background(), "test", slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop(context.Background()) }()
	for _, f := range otel.GetTextMapPropagator().Fields() {
		if f == "tracestate" {
			continue
		}
		if !carriesContext(http.Header{textproto.CanonicalMIMEHeaderKey(f): {"x"}}) {
			t.Errorf("a request whose headers hold %s alone carries no context to carriesContext", f)
		}
	}
}

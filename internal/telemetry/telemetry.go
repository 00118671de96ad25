// Package telemetry starts OpenTelemetry tracing the way every OTel SDK
// does: from the standard OTEL_* environment variables, so an operator
// configures Manifold as any other traced service.
//
// OTEL_TRACES_EXPORTER names the exporters, comma-separated: otlp (the
// default), console (each span a JSON line on stderr, for a first look
// without a collector) or none. Left unset, tracing is on when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set;
// OTEL_SDK_DISABLED=true turns it off whatever the rest says. OTLP goes
// over http/protobuf unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL says grpc. The exporters, the sampler
// (OTEL_TRACES_SAMPLER) and the batcher (OTEL_BSP_*) read their own
// variables. The W3C trace-context propagator is installed either way:
// with tracing off, a caller's traceparent still reaches the upstreams, as
// Manifold's own spans would.
//
// What goes wrong with the export is the structured log's, summarized as
// an upstream's outage is (internal/outage): one line when exports start
// failing, one per interval while they go on, one when they recover; the
// SDK's other errors and its own logger go to the structured log too.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/manifold-mcp/manifold/internal/outage"
)

// Exporters returns the exporters the environment asks for, none when
// tracing is off.
func Exporters() ([]string, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	list := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if list == "" {
		if firstSet("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
		return []string{"otlp"}, nil
	}
	var out []string
	for _, name := range strings.Split(list, ",") {
		switch name = strings.ToLower(strings.TrimSpace(name)); name {
		case "none", "":
		case "otlp", "console":
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		default:
			return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER %q names %q, which is not supported (otlp, console or none)", list, name)
		}
	}
	return out, nil
}

// Start installs the propagator and, when the environment asks for it, a
// tracer provider exporting as it says; console is where the console
// exporter writes (stderr, shared with the log). The returned function
// flushes the spans still buffered and stops the exporters; call it at
// shutdown.
func Start(ctx context.Context, version string, log *slog.Logger, console io.Writer) (func(context.Context) error, error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	names, err := Exporters()
	if err != nil || len(names) == 0 {
		return func(context.Context) error { return nil }, err
	}
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
	otel.SetErrorHandler(errorLog(log))
	opts := []sdktrace.TracerProviderOption{}
	var described []string
	for _, name := range names {
		exp, what, err := newExporter(ctx, name, console)
		if err != nil {
			return nil, err
		}
		described = append(described, what)
		opts = append(opts, sdktrace.WithBatcher(watched(exp, log, what)))
	}
	// Defaults first: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("manifold"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	otel.SetTracerProvider(tp)
	log.Info("tracing on", "exporters", strings.Join(described, ","))
	return tp.Shutdown, nil
}

// newExporter builds the exporter name stands for, and says which it is
// (the OTLP protocol with it).
func newExporter(ctx context.Context, name string, console io.Writer) (sdktrace.SpanExporter, string, error) {
	if name == "console" {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(console))
		return exp, "console", err
	}
	var exp sdktrace.SpanExporter
	var err error
	switch protocol := firstSet("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); protocol {
	case "", "http/protobuf":
		name = "otlp http/protobuf"
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		name = "otlp grpc"
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, "", fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q is not supported (http/protobuf or grpc)", protocol)
	}
	if err != nil {
		return nil, "", fmt.Errorf("tracing: %w", err)
	}
	return exp, name, nil
}

func firstSet(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// watchedExporter tells an outage summary of each export: the batch
// processor would otherwise hand every failed batch to the error handler,
// a line per batch for as long as a collector is down.
type watchedExporter struct {
	sdktrace.SpanExporter
	outage *outage.Summary
}

func watched(exp sdktrace.SpanExporter, log *slog.Logger, what string) sdktrace.SpanExporter {
	return &watchedExporter{SpanExporter: exp, outage: &outage.Summary{Log: log.With("exporter", what), Subject: "trace export"}}
}

// ExportSpans exports, and answers nil either way: the failure is the
// summary's to log, and the batch is not retried by the processor anyway.
// An export cancelled (a shutdown) says nothing of the collector: neither
// a failure nor a recovery.
func (e *watchedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	switch err := e.SpanExporter.ExportSpans(ctx, spans); {
	case errors.Is(err, context.Canceled):
	case err != nil:
		e.outage.Failure(err, "spans", len(spans))
	default:
		e.outage.Success()
	}
	return nil
}

// errorLog is the SDK's error handler: its errors (other than the
// exports', above) in the structured log, summarized as an outage that
// never ends, so a stream of them costs a line per interval.
func errorLog(log *slog.Logger) otel.ErrorHandler {
	s := &outage.Summary{Log: log, Subject: "tracing"}
	return otel.ErrorHandlerFunc(func(err error) { s.Failure(err) })
}

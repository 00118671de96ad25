package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// OTEL_TRACES_EXPORTER decides, as the OTel SDKs read it; unset, an OTLP
// endpoint turns OTLP on, and OTEL_SDK_DISABLED wins over everything.
func TestExporters(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want []string
		err  string
	}{
		{env: nil, want: nil},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: []string{"otlp"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: []string{"otlp"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, want: []string{"console"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": " OTLP , console,otlp"}, want: []string{"otlp", "console"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: nil},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "TRUE"}, want: nil},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: `names "zipkin", which is not supported`},
	} {
		for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
			t.Setenv(k, c.env[k])
		}
		got, err := Exporters()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want one saying %q", c.env, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%v: %v, %v; want %v", c.env, got, err, c.want)
		}
	}
}

// failingExporter answers each export with the next of its errors.
type failingExporter struct {
	sdktrace.SpanExporter
	errs []error
}

func (f *failingExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	err := f.errs[0]
	f.errs = f.errs[1:]
	return err
}

// An export cancelled while the collector is down (a shutdown's) is no
// recovery: the outage goes on until an export succeeds.
func TestCancelledExportIsNoRecovery(t *testing.T) {
	down := errors.New("connection refused")
	exp := &failingExporter{errs: []error{down, down, context.Canceled, nil}}
	w := watched(exp, slog.New(slog.DiscardHandler), "otlp").(*watchedExporter)
	clock := time.Unix(0, 0)
	w.outage.Now = func() time.Time { return clock }
	w.outage.Settle = time.Second
	_ = w.ExportSpans(context.Background(), nil)
	_ = w.ExportSpans(context.Background(), nil)
	clock = clock.Add(2 * time.Second) // past Settle since the last failure
	_ = w.ExportSpans(context.Background(), nil)
	if !w.outage.Failing() {
		t.Fatal("after two failures and a cancelled export, the outage is over")
	}
	_ = w.ExportSpans(context.Background(), nil)
	if w.outage.Failing() {
		t.Error("an export that succeeded did not end the outage")
	}
}

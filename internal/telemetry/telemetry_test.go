package telemetry

import (
	"slices"
	"strings"
	"testing"
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

package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A consent link is for the user it is shown to: it carries live state
// whose holder can complete the consent. Shown to a caller without URL
// elicitation (in the -32021 error), and to one with it (input_required),
// it is in no span Manifold records (attributes, events, status) and in no
// log line.
func TestConsentLinkStaysOutOfSpansAndLogs(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })

	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	plain := strings.Replace(oauthMeta, `"elicitation":{"url":{}}`, "", 1)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crm_whoami","arguments":{},%s}}`, plain)
	r := post(t, p.URL, withToken(headers("tools/call", "crm_whoami"), alice), body)
	var data struct {
		URL string `json:"url"`
	}
	if r.Error == nil || r.Error.Code != -32021 || json.Unmarshal(r.Error.Data, &data) != nil || data.URL == "" {
		t.Fatalf("a caller without URL elicitation: want -32021 naming the link, got %s", r.Body)
	}
	links := []string{data.URL}
	if asked := whoami(t, p.URL, alice, ""); asked.link != "" {
		links = append(links, asked.link)
	} else {
		t.Fatalf("a caller with URL elicitation was not asked: %+v", asked)
	}
	secrets := map[string]bool{}
	for _, link := range links {
		secrets[link] = true
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		for _, vs := range u.Query() {
			for _, v := range vs {
				if len(v) >= 16 && !strings.HasPrefix(v, "http") { // state, challenges: not the client id or redirect
					secrets[v] = true
				}
			}
		}
	}
	spans := rec.Ended()
	if len(spans) == 0 {
		t.Fatal("no span was recorded")
	}
	for _, s := range spans {
		var texts []string
		texts = append(texts, s.Status().Description)
		for _, kv := range s.Attributes() {
			texts = append(texts, string(kv.Key)+"="+kv.Value.Emit())
		}
		for _, ev := range s.Events() {
			texts = append(texts, ev.Name)
			for _, kv := range ev.Attributes {
				texts = append(texts, string(kv.Key)+"="+kv.Value.Emit())
			}
		}
		for secret := range secrets {
			for _, text := range texts {
				if strings.Contains(text, secret) {
					t.Errorf("span %q holds %q: %s", s.Name(), secret, text)
				}
			}
		}
	}
	for secret := range secrets {
		if strings.Contains(p.Logs.String(), secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
}

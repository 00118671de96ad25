package test

import (
	"fmt"
	"strings"
	"testing"
)

// Attacks on the tool cache (issue #21): arguments an upstream tells
// apart must never share an entry.

// Two strings that differ only in a lone surrogate are different
// arguments to an upstream that keeps them (the TypeScript SDK, on
// JavaScript strings); Go's JSON decoding makes each U+FFFD, so a key
// made through it gives both one entry, and the second caller gets the
// first one's answer.
func TestToolCacheKeepsLoneSurrogatesApart(t *testing.T) {
	node := nodeOrSkip(t)
	script := tsScript(t, "cached-stdio-server.mjs")
	p := startProxy(t, fmt.Sprintf("upstreams:\n  - name: ts\n    command: [%q, %q]\n    %s\n", node, script, toolCacheYAML("60s", "public")))
	first := callToolAs(t, p.URL, "", "ts_codes", `{"q":"\ud800"}`)
	if !strings.HasPrefix(first.Text, "codes=d800 ") {
		t.Fatalf("the first call: %+v", first)
	}
	for _, q := range []string{`\udbff`, `\ufffd`} {
		got := callToolAs(t, p.URL, "", "ts_codes", fmt.Sprintf(`{"q":"%s"}`, q))
		if want := "codes=" + strings.TrimPrefix(q, `\u`) + " "; !strings.HasPrefix(got.Text, want) {
			t.Errorf(`q "%s" was answered %q (cache %v), the answer to q "\ud800"`, q, got.Text, got.Cache)
		}
	}
	if again := callToolAs(t, p.URL, "", "ts_codes", `{"q":"\ud800"}`); again.Cache == nil || again.Text != first.Text {
		t.Errorf("the same call again: %+v", again)
	}
}

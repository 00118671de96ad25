package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A reload that takes an upstream away from a principal (its access rules
// no longer admit her) silences it for her: her listen stream and her
// legacy session's GET stream, both opened before the reload, are told of
// no change of its resources after it, though they go on hearing of the
// upstream she keeps. A principal the new rules still admit goes on being
// told of both on both kinds of stream; and before the reload, her streams
// too were told of the upstream's changes.
func TestReloadRevokingAccessSilencesUpdates(t *testing.T) {
	is := newIssuer(t)
	open, vault := sdkToolServer("open", sdkOptions{resources: 2}), sdkToolServer("vault", sdkOptions{resources: 2})
	openUp, _ := trackedModern(t, open)
	vaultUp, _ := trackedModern(t, vault)
	conf := func(admitted string) string {
		return is.authYAML("") + "upstreams:" + httpUpstreamYAML("open", openUp.URL) +
			httpUpstreamYAML("vault", vaultUp.URL, "access: [{claim: groups, values: ["+admitted+"]}]")
	}
	p, reload := startReloadable(t, conf("all"))
	erin := is.mint("rsa-1", claims{"sub": "erin", "groups": []string{"all", "eng"}})
	sam := is.mint("rsa-1", claims{"sub": "sam", "groups": []string{"all", "sales"}})
	watched := []string{"open+test://open/0", "vault+test://vault/0", "vault+test://vault/1"}
	streams := map[string]<-chan map[string]any{}
	for who, tok := range map[string]string{"erin": erin, "sam": sam} {
		filter, _ := json.Marshal(map[string]any{"resourceSubscriptions": watched})
		l := listen(t, p.URL, 1, string(filter), "Authorization", "Bearer "+tok)
		if ack := l.next(t, 5*time.Second); fmt.Sprint(ack["params"]) == "" {
			t.Fatalf("%s's listen: %v", who, ack)
		}
		streams[who+"'s listen stream"] = l.events
		streams[who+"'s legacy session"] = decoded(legacySubscribed(t, p.URL, tok, watched))
	}
	// Before the reload every stream hears of the vault (its resource 1).
	for name, s := range streams {
		if seen := pokeUntilSeen(t, vault, "test://vault/1", s, "vault+test://vault/1"); !slices.Contains(seen, "vault+test://vault/1") {
			t.Fatalf("before the reload, %s was not told of the vault", name)
		}
	}

	reload(conf("eng"))
	// After it, the vault's resource 0 changes until each of Erin's
	// streams has heard of it; then the open upstream's, until each of
	// Sam's has. Were the vault's change told to Sam, it would come first.
	for _, name := range []string{"erin's listen stream", "erin's legacy session"} {
		pokeUntilSeen(t, vault, "test://vault/0", streams[name], "vault+test://vault/0")
	}
	for _, name := range []string{"sam's listen stream", "sam's legacy session"} {
		if seen := pokeUntilSeen(t, open, "test://open/0", streams[name], "open+test://open/0"); slices.Contains(seen, "vault+test://vault/0") {
			t.Errorf("%s was told of the vault's change after the reload revoked Sam's access: %v", name, seen)
		}
	}
}

// pokeUntilSeen has s announce a change of uri, again every 300 ms, until
// stream tells of want (10 s at most), and returns the URIs of every
// resources/updated the stream told meanwhile.
func pokeUntilSeen(t *testing.T, s *mcp.Server, uri string, stream <-chan map[string]any, want string) []string {
	t.Helper()
	var seen []string
	eventually(t, 10*time.Second, func() error {
		updateUpstream(t, s, uri)
		timeout := time.After(300 * time.Millisecond)
		for {
			select {
			case m, ok := <-stream:
				if !ok {
					t.Fatal("the stream ended")
				}
				params, _ := m["params"].(map[string]any)
				if m["method"] != "notifications/resources/updated" {
					continue
				}
				seen = append(seen, fmt.Sprint(params["uri"]))
				if params["uri"] == want {
					return nil
				}
			case <-timeout:
				return errors.New("not told yet")
			}
		}
	})
	return seen
}

// legacySubscribed opens a 2025-11-25 session as the bearer of tok,
// subscribes it to uris and opens its GET stream.
func legacySubscribed(t *testing.T, url, tok string, uris []string) <-chan string {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer " + tok}}
	r := post(t, url, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := r.Header.Get("Mcp-Session-Id")
	if r.Status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: HTTP %d %s", r.Status, r.Body)
	}
	h.Set("Mcp-Session-Id", sid)
	h.Set("MCP-Protocol-Version", "2025-11-25")
	post(t, url, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, uri := range uris {
		if r := post(t, url, h, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/subscribe","params":{"uri":%q}}`, i+2, uri)); r.Error != nil {
			t.Fatalf("subscribe %s: %s", uri, r.Body)
		}
	}
	return openSessionStream(t, url, sid, "Authorization", "Bearer "+tok)
}

// decoded is a stream of JSON messages, decoded.
func decoded(in <-chan string) <-chan map[string]any {
	out := make(chan map[string]any, 64)
	go func() {
		defer close(out)
		for s := range in {
			var m map[string]any
			if json.Unmarshal([]byte(s), &m) == nil {
				out <- m
			}
		}
	}()
	return out
}

package test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The downstream endpoint against each malformed-request case of the
// specification, asserted on raw HTTP: status, JSON-RPC code, and the echoed
// id.
func TestMalformedRequests(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 1}))
	p := startProxy(t, "allowed_hosts: [manifold.example.com]\nallowed_origins: [https://app.example.com]\nmax_request_bytes: 4KiB\nupstreams:"+httpUpstreamYAML("alpha", alpha.URL))
	discover := func(meta string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":41,"method":"server/discover","params":{"_meta":%s}}`, meta)
	}
	with := func(h http.Header, kv ...string) http.Header {
		c := h.Clone()
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				c.Del(kv[i])
			} else {
				c.Set(kv[i], kv[i+1])
			}
		}
		return c
	}
	hd := headers("server/discover", "")
	readURI := "alpha+test://alpha/0"
	hr := headers("resources/read", readURI)
	readBody := rpcBody(42, "resources/read", fmt.Sprintf(`"uri":%q`, readURI))

	cases := []struct {
		name   string
		header http.Header
		body   string
		status int
		code   int64 // 0: a result is expected
		id     string
	}{
		{"valid discover", hd, rpcBody(41, "server/discover", ""), 200, 0, "41"},
		{"no clientInfo is fine", hd, discover(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`), 200, 0, "41"},
		{"string id echoed", hd, strings.Replace(rpcBody(1, "server/discover", ""), `"id":1`, `"id":"abc"`, 1), 200, 0, `"abc"`},
		{"missing _meta", hd, `{"jsonrpc":"2.0","id":41,"method":"server/discover","params":{}}`, 400, -32602, "41"},
		{"missing params", hd, `{"jsonrpc":"2.0","id":41,"method":"server/discover"}`, 400, -32602, "41"},
		{"missing protocolVersion", hd, discover(`{"io.modelcontextprotocol/clientCapabilities":{}}`), 400, -32602, "41"},
		{"missing clientCapabilities", hd, discover(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`), 400, -32602, "41"},
		{"clientCapabilities not an object", hd, discover(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]}`), 400, -32602, "41"},
		{"_meta not an object", hd, discover(`"x"`), 400, -32602, "41"},
		{"version header missing", with(hd, "MCP-Protocol-Version", ""), rpcBody(41, "server/discover", ""), 400, -32020, "41"},
		{"version header differs from _meta", with(hd, "MCP-Protocol-Version", "2025-11-25"), rpcBody(41, "server/discover", ""), 400, -32020, "41"},
		{"mismatch beats unsupported", hd, discover(`{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}`), 400, -32020, "41"},
		{"unsupported version", with(hd, "MCP-Protocol-Version", "v999.0.0"), discover(`{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}`), 400, -32022, "41"},
		{"legacy version", with(hd, "MCP-Protocol-Version", "2025-11-25"), discover(`{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}`), 400, -32022, "41"},
		{"Mcp-Method missing", with(hd, "Mcp-Method", ""), rpcBody(41, "server/discover", ""), 400, -32020, "41"},
		{"Mcp-Method differs", with(hd, "Mcp-Method", "resources/list"), rpcBody(41, "server/discover", ""), 400, -32020, "41"},
		{"Mcp-Method differs in case", with(hd, "Mcp-Method", "SERVER/DISCOVER"), rpcBody(41, "server/discover", ""), 400, -32020, "41"},
		{"header names are case-insensitive", http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "mcp-protocol-version": {"2026-07-28"}, "MCP-METHOD": {"server/discover"}}, rpcBody(41, "server/discover", ""), 200, 0, "41"},
		{"Mcp-Name missing", with(hr, "Mcp-Name", ""), readBody, 400, -32020, "42"},
		{"Mcp-Name differs", with(hr, "Mcp-Name", "alpha+test://alpha/1"), readBody, 400, -32020, "42"},
		{"Mcp-Name malformed base64", with(hr, "Mcp-Name", "=?base64?not base64!?="), readBody, 400, -32020, "42"},
		{"Mcp-Name base64 of another value", with(hr, "Mcp-Name", "=?base64?"+base64.StdEncoding.EncodeToString([]byte("x"))+"?="), readBody, 400, -32020, "42"},
		{"Mcp-Name base64 of the value", with(hr, "Mcp-Name", "=?base64?"+base64.StdEncoding.EncodeToString([]byte(readURI))+"?="), readBody, 200, 0, "42"},
		{"uri not a string", hr, rpcBody(42, "resources/read", `"uri":7`), 400, -32602, "42"},
		{"uri not a URI", with(hr, "Mcp-Name", "not a uri"), rpcBody(42, "resources/read", `"uri":"not a uri"`), 400, -32602, "42"},
		{"unknown method", headers("unknown/method", ""), rpcBody(43, "unknown/method", ""), 404, -32601, "43"},
		{"tasks/list is not served", headers("tasks/list", ""), rpcBody(43, "tasks/list", ""), 404, -32601, "43"},
		{"removed initialize", headers("initialize", ""), rpcBody(44, "initialize", ""), 404, -32601, "44"},
		{"removed ping", headers("ping", ""), rpcBody(44, "ping", ""), 404, -32601, "44"},
		{"removed logging/setLevel", headers("logging/setLevel", ""), rpcBody(44, "logging/setLevel", ""), 404, -32601, "44"},
		{"removed resources/subscribe", headers("resources/subscribe", ""), rpcBody(44, "resources/subscribe", `"uri":"alpha+test://alpha/0"`), 404, -32601, "44"},
		{"removed resources/unsubscribe", headers("resources/unsubscribe", ""), rpcBody(44, "resources/unsubscribe", `"uri":"alpha+test://alpha/0"`), 404, -32601, "44"},
		{"parse error", hd, `{"jsonrpc":"2.0","id":1,`, 400, -32700, "null"},
		{"empty body", hd, ``, 400, -32600, "null"},
		{"batch", hd, `[` + rpcBody(1, "server/discover", "") + `]`, 400, -32600, "null"},
		{"not an object", hd, `"hello"`, 400, -32600, "null"},
		{"wrong jsonrpc version", hd, strings.Replace(rpcBody(45, "server/discover", ""), `"2.0"`, `"1.0"`, 1), 400, -32600, "45"},
		{"id is an object", hd, `{"jsonrpc":"2.0","id":{"a":1},"method":"server/discover","params":{}}`, 400, -32600, "null"},
		{"id is fractional", hd, `{"jsonrpc":"2.0","id":1.5,"method":"server/discover","params":{}}`, 400, -32600, "null"},
		{"method not a string", hd, `{"jsonrpc":"2.0","id":46,"method":7,"params":{}}`, 400, -32600, "46"},
		{"params an array", hd, `{"jsonrpc":"2.0","id":47,"method":"server/discover","params":[]}`, 400, -32600, "47"},
		{"wrong content type", with(hd, "Content-Type", "text/plain"), rpcBody(41, "server/discover", ""), 415, -32600, "null"},
		{"unacceptable Accept", with(hd, "Accept", "text/html"), rpcBody(41, "server/discover", ""), 406, -32600, "null"},
		{"body too large", hd, rpcBody(41, "server/discover", `"pad":"`+strings.Repeat("x", 5000)+`"`), 413, -32600, "null"},
		{"foreign Origin", with(hd, "Origin", "http://evil.example.com"), rpcBody(41, "server/discover", ""), 403, -32600, "null"},
		{"foreign Host", with(hd, "Host", "evil.example.com"), rpcBody(41, "server/discover", ""), 403, -32600, "null"},
		{"foreign Host posing as loopback", with(hd, "Host", "localhost.evil.example.com"), rpcBody(41, "server/discover", ""), 403, -32600, "null"},
		{"loopback Origin", with(hd, "Origin", "http://localhost:3000"), rpcBody(41, "server/discover", ""), 200, 0, "41"},
		{"configured Origin", with(hd, "Origin", "https://app.example.com"), rpcBody(41, "server/discover", ""), 200, 0, "41"},
		{"configured Host", with(hd, "Host", "manifold.example.com:443"), rpcBody(41, "server/discover", ""), 200, 0, "41"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := post(t, p.URL, c.header, c.body)
			if r.Status != c.status {
				t.Errorf("HTTP %d, want %d: %s", r.Status, c.status, r.Body)
			}
			if c.code == 0 {
				if r.Error != nil || r.Result == nil {
					t.Fatalf("want a result: %s", r.Body)
				}
				var res struct {
					ResultType string         `json:"resultType"`
					Meta       map[string]any `json:"_meta"`
				}
				_ = json.Unmarshal(r.Result, &res)
				if res.ResultType != "complete" || res.Meta["io.modelcontextprotocol/serverInfo"] == nil {
					t.Errorf("result lacks resultType or serverInfo: %s", r.Result)
				}
			} else if r.Error == nil || r.Error.Code != c.code {
				t.Errorf("want error %d: %s", c.code, r.Body)
			}
			if got := string(r.ID); got != c.id && !(c.id == "null" && got == "") {
				t.Errorf("id = %s, want %s", got, c.id)
			}
		})
	}

	t.Run("unsupported version data", func(t *testing.T) {
		r := post(t, p.URL, with(hd, "MCP-Protocol-Version", "2099-01-01"), discover(`{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}`))
		var data struct {
			Supported []string `json:"supported"`
			Requested string   `json:"requested"`
		}
		if err := json.Unmarshal(r.Error.Data, &data); err != nil || !slices.Equal(data.Supported, []string{"2026-07-28"}) || data.Requested != "2099-01-01" {
			t.Errorf("data = %s", r.Error.Data)
		}
	})
	t.Run("GET and DELETE", func(t *testing.T) {
		for _, m := range []string{http.MethodGet, http.MethodDelete, http.MethodPut} {
			r := do(t, m, p.URL, hd, "")
			if r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "POST" {
				t.Errorf("%s: HTTP %d, Allow %q", m, r.Status, r.Header.Get("Allow"))
			}
		}
	})
	t.Run("notifications and responses get 202", func(t *testing.T) {
		for _, body := range []string{
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
			`{"jsonrpc":"2.0","method":"notifications/whatever"}`,
			`{"jsonrpc":"2.0","id":1,"result":{}}`,
		} {
			r := post(t, p.URL, headers("notifications/cancelled", ""), body)
			if r.Status != http.StatusAccepted || len(r.Body) != 0 {
				t.Errorf("%s: HTTP %d body %q", body, r.Status, r.Body)
			}
		}
	})
	t.Run("discover advertises what Manifold serves", func(t *testing.T) {
		var d struct {
			SupportedVersions []string                   `json:"supportedVersions"`
			Capabilities      map[string]json.RawMessage `json:"capabilities"`
			TTLms             *int                       `json:"ttlMs"`
			CacheScope        string                     `json:"cacheScope"`
		}
		post(t, p.URL, hd, rpcBody(1, "server/discover", "")).result(t, &d)
		if !slices.Equal(d.SupportedVersions, []string{"2026-07-28"}) || d.Capabilities["resources"] == nil || d.TTLms == nil || d.CacheScope != "public" {
			t.Errorf("discover = %+v", d)
		}
		for k := range d.Capabilities {
			if k != "resources" {
				t.Errorf("discover advertises %q, which Manifold does not serve", k)
			}
		}
	})
}

// Nothing a client sends crashes or wedges the endpoint: a bounded run of
// random and mutated bodies and headers, then a valid request still works.
func TestGarbageNeverWedges(t *testing.T) {
	alpha := modernSDK(t, newSDKServer("alpha", sdkOptions{resources: 1}))
	p := startProxy(t, "upstreams:"+httpUpstreamYAML("alpha", alpha.URL))
	rng := rand.New(rand.NewPCG(1, 2))
	valid := rpcBody(1, "resources/read", `"uri":"alpha+test://alpha/0"`)
	pieces := []string{`{`, `}`, `[`, `]`, `"`, `:`, `,`, `null`, `"_meta"`, `"method"`, `"resources/read"`, `"uri"`, `\u0000`, `"id"`, `1e999`, `-1`, `{"a":`, "\xff", `"params"`}
	for i := 0; i < 500; i++ {
		var body string
		switch i % 3 {
		case 0: // mutate a valid request
			b := []byte(valid)
			for j := 0; j < 1+rng.IntN(4); j++ {
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			}
			body = string(b)
		case 1: // splice fragments
			for j := 0; j < rng.IntN(20); j++ {
				body += pieces[rng.IntN(len(pieces))]
			}
		default: // valid envelope, odd params
			body = strings.Replace(valid, `"uri":"alpha+test://alpha/0"`, `"uri":`+pieces[rng.IntN(len(pieces))], 1)
		}
		h := headers("resources/read", "alpha+test://alpha/0")
		if rng.IntN(4) == 0 {
			h.Set("Mcp-Name", string(rune(rng.IntN(0x2000))))
		}
		r := post(t, p.URL, h, body)
		if r.Status >= 500 {
			t.Fatalf("HTTP %d for %q: %s", r.Status, body, r.Body)
		}
	}
	var rr readResult
	post(t, p.URL, headers("resources/read", "alpha+test://alpha/0"), valid).result(t, &rr)
	if rr.Contents[0].Text != "alpha resource 0" {
		t.Errorf("after the garbage, read = %+v", rr.Contents)
	}
}

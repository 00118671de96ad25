package test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The bridge holds a legacy upstream's call while its question is put to a
// modern caller as input_required; these tests are about who may resume a
// held call, and with what.

// bridgeMeta declares the capabilities the held calls need.
const bridgeMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{}}}`

// heldCall is the input_required answer to one elicitation call.
type heldCall struct {
	state, key string
}

// elicitAs calls the everything-server's test_elicitation as token and
// returns the requestState and the question's key.
func elicitAs(t *testing.T, url, token string) heldCall {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_elicitation","arguments":{"message":"who?"},%s}}`, bridgeMeta)
	var res struct {
		ResultType    string                     `json:"resultType"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  string                     `json:"requestState"`
	}
	post(t, url, withToken(headers("tools/call", "test_elicitation"), token), body).result(t, &res)
	if res.ResultType != "input_required" || len(res.InputRequests) != 1 || res.RequestState == "" {
		t.Fatalf("first answer: %+v", res)
	}
	h := heldCall{state: res.RequestState}
	for k := range res.InputRequests {
		h.key = k
	}
	return h
}

// retryAs retries a held call as token, answering with username.
func retryAs(t *testing.T, url, token string, h heldCall, username string) *rawResponse {
	t.Helper()
	answer := fmt.Sprintf(`{"action":"accept","content":{"username":%q}}`, username)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test_elicitation","arguments":{"message":"who?"},"requestState":%q,"inputResponses":{%q:%s},%s}}`, h.state, h.key, answer, bridgeMeta)
	return post(t, url, withToken(headers("tools/call", "test_elicitation"), token), body)
}

// completes asserts that a retry answered with the held call's result,
// naming username.
func completes(t *testing.T, r *rawResponse, username string) {
	t.Helper()
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	r.result(t, &res)
	if len(res.Content) == 0 || !strings.Contains(res.Content[0].Text, "username:"+username) {
		t.Fatalf("retry answered %s, want the result naming %s", r.Body, username)
	}
}

func withToken(h map[string][]string, token string) map[string][]string {
	if token != "" {
		h["Authorization"] = []string{"Bearer " + token}
	}
	return h
}

// A held call belongs to the principal whose call it is: another
// principal's retry with its requestState is refused with -32602 and does
// not spend it, and each caller's own retry still completes, with its own
// answer.
func TestHeldCallBoundToPrincipal(t *testing.T) {
	is := newIssuer(t)
	p := startProxy(t, is.authYAML("")+"namespace: none\nupstreams:"+httpUpstreamYAML("everything", everythingServer(t, false)))
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	bob := is.mint("ec-1", claims{"sub": "bob"})
	aliceAgain := is.mint("ed-1", claims{"sub": "alice", "jti": "refreshed"})
	heldA, heldB := elicitAs(t, p.URL, alice), elicitAs(t, p.URL, bob)
	for i := 0; i < 3; i++ {
		retryAs(t, p.URL, bob, heldA, "bob").wantError(t, 400, -32602)
		retryAs(t, p.URL, alice, heldB, "alice").wantError(t, 400, -32602)
	}
	completes(t, retryAs(t, p.URL, alice, heldA, "alice"), "alice")
	completes(t, retryAs(t, p.URL, bob, heldB, "bob"), "bob")

	// The credential binds too: alice with another token is refused.
	held := elicitAs(t, p.URL, alice)
	retryAs(t, p.URL, aliceAgain, held, "mallory").wantError(t, 400, -32602)
	completes(t, retryAs(t, p.URL, alice, held, "alice"), "alice")
}

// A requestState is Manifold's only when its MAC is: one whose payload is
// well formed but whose MAC is wrong, or missing, is refused, and the held
// call it names is not spent.
func TestHeldCallStateTampered(t *testing.T) {
	p := fixtureProxy(t, false)
	held := elicitAs(t, p.URL, "")
	payload, mac, ok := strings.Cut(strings.TrimPrefix(held.state, "manifold.hold."), ".")
	if !ok {
		t.Fatalf("state %q has no MAC", held.state)
	}
	sum, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil {
		t.Fatal(err)
	}
	sum[0] ^= 1
	for name, state := range map[string]string{
		"wrong MAC":   "manifold.hold." + payload + "." + base64.RawURLEncoding.EncodeToString(sum),
		"missing MAC": "manifold.hold." + payload,
		"empty MAC":   "manifold.hold." + payload + ".",
	} {
		r := retryAs(t, p.URL, "", heldCall{state: state, key: held.key}, "mallory")
		r.wantError(t, 400, -32602)
		if !strings.Contains(string(r.Body), "requestState") {
			t.Errorf("%s: %s", name, r.Body)
		}
	}
	completes(t, retryAs(t, p.URL, "", held, "ada"), "ada")
}

// Two replicas share a secret, so each can check the other's MACs, and
// each numbers its held calls alike: a requestState taken to the replica
// that did not issue it is refused there, and spends neither that
// replica's held call of the same number nor its own.
func TestHeldCallStateOtherReplica(t *testing.T) {
	up := everythingServer(t, false)
	yaml := "cursor_secret: shared-between-replicas\nnamespace: none\nupstreams:" + httpUpstreamYAML("everything", up)
	one, two := startProxy(t, yaml), startProxy(t, yaml)
	held1, held2 := elicitAs(t, one.URL, ""), elicitAs(t, two.URL, "")
	r := retryAs(t, two.URL, "", held1, "mallory")
	r.wantError(t, 400, -32602)
	if !strings.Contains(string(r.Body), "replica") {
		t.Errorf("refusal does not say why: %s", r.Body)
	}
	completes(t, retryAs(t, two.URL, "", held2, "two"), "two")
	completes(t, retryAs(t, one.URL, "", held1, "one"), "one")
}

// askingServer is a go-sdk server whose tool ask and whose resource
// test://NAME/asking each elicit a username in the middle of the request,
// and answer with what they got (or why they got nothing).
func askingServer(name string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "asks-" + name, Version: "1"}, nil)
	elicit := func(ctx context.Context, ss *mcp.ServerSession, who string) string {
		res, err := ss.Elicit(ctx, &mcp.ElicitParams{Message: who + " asks", RequestedSchema: map[string]any{"type": "object"}})
		if err != nil {
			return who + " refused: " + err.Error()
		}
		return fmt.Sprintf("%s got %v", who, res.Content["username"])
	}
	s.AddTool(&mcp.Tool{Name: "ask", InputSchema: map[string]any{"type": "object"}}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: elicit(ctx, req.Session, "tool")}}}, nil
	})
	uri := "test://" + name + "/asking"
	s.AddResource(&mcp.Resource{URI: uri, Name: "asking"}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, Text: elicit(ctx, req.Session, "read")}}}, nil
	})
	return s
}

// On stdio every question of the server arrives on the one stdout, naming
// no request. One raised while a read (which cannot be asked anything) and
// another caller's held tool call are both in flight cannot be attributed:
// it is refused, and never reaches the held call's caller, whose own
// question and answer go on as before.
func TestQuestionOnSharedChannelNotMisattributed(t *testing.T) {
	p := startProxy(t, "upstreams:"+childUpstream("kid", "sdk-asks:kid")+"    protocol: 2025-11-25\n")
	call := func(id int, extra string) *rawResponse {
		return post(t, p.URL, headers("tools/call", "kid_ask"), fmt.Sprintf(
			`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"kid_ask","arguments":{}%s,%s}}`, id, extra, bridgeMeta))
	}
	var first struct {
		InputRequests map[string]struct {
			Params struct {
				Message string `json:"message"`
			} `json:"params"`
		} `json:"inputRequests"`
		RequestState string `json:"requestState"`
	}
	call(1, "").result(t, &first)
	var key string
	for k, q := range first.InputRequests {
		if q.Params.Message != "tool asks" {
			t.Fatalf("question %q", q.Params.Message)
		}
		key = k
	}
	// The held call is waiting for bob's retry; alice reads.
	read := make(chan *rawResponse, 1)
	go func() {
		read <- post(t, p.URL, headers("resources/read", "kid+test://kid/asking"),
			`{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"kid+test://kid/asking",`+bridgeMeta+`}}`)
	}()
	var got string
	select {
	case r := <-read:
		got = string(r.Body)
	case <-time.After(20 * time.Second):
		// The read's question went to the held call: answering it makes the
		// held call put the read's question to bob.
	}
	final := call(2, fmt.Sprintf(`,"requestState":%q,"inputResponses":{%q:{"action":"accept","content":{"username":"bob"}}}`, first.RequestState, key))
	if !strings.Contains(string(final.Body), "tool got bob") {
		t.Errorf("bob's retry answered %s", final.Body)
	}
	if got == "" {
		select {
		case r := <-read:
			got = string(r.Body)
		case <-time.After(30 * time.Second):
			t.Fatal("alice's read never answered: its question is held for bob")
		}
	}
	if !strings.Contains(got, "read refused") || strings.Contains(got, "bob") {
		t.Errorf("alice's read answered %s", got)
	}
}

// authAnswers refuses, with 401, every answer POSTed to a question of the
// server that does not carry the Authorization of the caller it asked, as
// a server that authenticates each message of a user does, and counts the
// refusals.
func authAnswers(h http.Handler, refused *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var m struct {
				Method string          `json:"method"`
				Result json.RawMessage `json:"result"`
			}
			if json.Unmarshal(body, &m) == nil && m.Method == "" && m.Result != nil && r.Header.Get("Authorization") != "Bearer alice" {
				refused.Add(1)
				http.Error(w, "who are you?", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// The answer to a server's question goes with the forwarded headers of the
// call it was put for, on a call's own stream (a legacy Streamable HTTP
// session) and on a shared one (the 2024-11-05 SSE stream): a server that
// authenticates every POST takes it, and the call completes.
func TestAnswerCarriesForwardedHeaders(t *testing.T) {
	for name, serve := range map[string]func(*mcp.Server) (http.Handler, string){
		"streamable": func(s *mcp.Server) (http.Handler, string) {
			return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil), "protocol: 2025-11-25"
		},
		"sse": func(s *mcp.Server) (http.Handler, string) {
			return mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil), "transport: sse"
		},
	} {
		t.Run(name, func(t *testing.T) {
			var refused atomic.Int32
			h, pin := serve(askingServer("a"))
			up := serveHTTP(t, authAnswers(h, &refused))
			p := startProxy(t, "upstreams:"+httpUpstreamYAML("a", up.URL, "forward_headers: [Authorization]", pin, "call_timeout: 20s"))
			hdr := withToken(headers("tools/call", "a_ask"), "alice")
			call := func(id int, extra string) *rawResponse {
				return post(t, p.URL, hdr, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"a_ask","arguments":{}%s,%s}}`, id, extra, bridgeMeta))
			}
			var first struct {
				InputRequests map[string]json.RawMessage `json:"inputRequests"`
				RequestState  string                     `json:"requestState"`
			}
			call(1, "").result(t, &first)
			var key string
			for k := range first.InputRequests {
				key = k
			}
			final := call(2, fmt.Sprintf(`,"requestState":%q,"inputResponses":{%q:{"action":"accept","content":{"username":"bob"}}}`, first.RequestState, key))
			if !strings.Contains(string(final.Body), "tool got bob") || refused.Load() != 0 {
				t.Errorf("answered %s; %d POSTs refused for want of the caller's Authorization", final.Body, refused.Load())
			}
		})
	}
}

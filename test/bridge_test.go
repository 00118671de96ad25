package test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
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

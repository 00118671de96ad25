package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// askKid calls kid_ask (askingServer's tool, which elicits a username) as
// token, with extra params (a retry's requestState and inputResponses).
func askKid(t *testing.T, url, token string, id int, extra string) *rawResponse {
	t.Helper()
	return post(t, url, withToken(headers("tools/call", "kid_ask"), token), fmt.Sprintf(
		`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"kid_ask","arguments":{}%s,%s}}`, id, extra, bridgeMeta))
}

// heldAsk is kid_ask's first answer: the question put to the caller.
type heldAsk struct {
	ResultType    string `json:"resultType"`
	InputRequests map[string]struct {
		Params struct {
			Message string `json:"message"`
		} `json:"params"`
	} `json:"inputRequests"`
	RequestState string `json:"requestState"`
	Content      []struct {
		Text string `json:"text"`
	} `json:"content"`
}

// answer retries the held call as token, accepting with username, and
// returns the tool's text.
func (h heldAsk) answer(t *testing.T, url, token, username string) string {
	t.Helper()
	var key string
	for k := range h.InputRequests {
		key = k
	}
	var res heldAsk
	askKid(t, url, token, 2, fmt.Sprintf(`,"requestState":%q,"inputResponses":{%q:{"action":"accept","content":{"username":%q}}}`,
		h.RequestState, key, username)).result(t, &res)
	if len(res.Content) == 0 {
		t.Fatalf("retry answered %+v", res)
	}
	return res.Content[0].Text
}

// childrenOfKind lists this test process's children that run the stdio
// server kind (childUpstream), by their environment.
func childrenOfKind(kind string) []int {
	want := []byte(childEnv + "=" + kind + "\x00")
	var out []int
	for _, pid := range childPIDs(os.Getpid()) {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err == nil && bytes.Contains(env, want) {
			out = append(out, pid)
		}
	}
	return out
}

// With a legacy stdio upstream whose tool elicits, two principals calling
// at once: on the one shared process the second question names no call it
// belongs to, and is refused with a message naming per_principal; with
// per_principal: true each principal has a process of its own, gets its own
// question and completes with its own answer. Every process is gone once
// Manifold stops.
func TestStdioQuestionsPerPrincipal(t *testing.T) {
	is := newIssuer(t)
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	bob := is.mint("ec-1", claims{"sub": "bob"})
	for _, perPrincipal := range []bool{false, true} {
		t.Run(fmt.Sprintf("per_principal=%v", perPrincipal), func(t *testing.T) {
			kind := fmt.Sprintf("sdk-asks:kid-%v-%d", perPrincipal, time.Now().UnixNano())
			yaml := is.authYAML("") + "upstreams:" + childUpstream("kid", kind) + "    protocol: 2025-11-25\n"
			if perPrincipal {
				yaml += "    per_principal: true\n"
			}
			p := startProxy(t, yaml)
			var heldA, first heldAsk
			askKid(t, p.URL, alice, 1, "").result(t, &heldA)
			if heldA.ResultType != "input_required" {
				t.Fatalf("alice's call answered %+v", heldA)
			}
			// Alice's call is held on her question; Bob calls.
			askKid(t, p.URL, bob, 1, "").result(t, &first)
			if !perPrincipal {
				if len(first.Content) == 0 || !strings.Contains(first.Content[0].Text, "tool refused") || !strings.Contains(first.Content[0].Text, "per_principal") {
					t.Errorf("bob's call on the shared process answered %+v, want a refusal naming per_principal", first)
				}
			} else if first.ResultType != "input_required" {
				t.Fatalf("bob's call answered %+v, want his own question", first)
			} else if got := first.answer(t, p.URL, bob, "bob"); got != "tool got bob" {
				t.Errorf("bob's retry answered %q", got)
			}
			if got := heldA.answer(t, p.URL, alice, "alice"); got != "tool got alice" {
				t.Errorf("alice's retry answered %q", got)
			}
			want := 1
			if perPrincipal {
				want = 2
			}
			if n := len(childrenOfKind(kind)); n != want {
				t.Errorf("%d processes of the upstream running, want %d", n, want)
			}
			p.stop()
			if pids := childrenOfKind(kind); len(pids) != 0 {
				t.Errorf("processes %v still running after Manifold stopped", pids)
			}
		})
	}
}

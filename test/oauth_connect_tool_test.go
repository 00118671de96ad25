package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/redistest"
)

// The connect tool over raw HTTP, as a 2026-07-28 caller sees it: the
// answers of its call, and what its listen streams are told once its user
// consented.

// canOpenURLs declares that the caller can be asked to open a URL; noCaps
// that it can be asked nothing.
const (
	canOpenURLs = `{"elicitation":{"url":{}}}`
	noCaps      = `{}`
)

// connectCall calls crm_connect as token's caller, declaring caps, with
// extra params (a retry's).
func connectCall(t *testing.T, url, token, caps, extra string) *rawResponse {
	t.Helper()
	meta := fmt.Sprintf(`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":%s,"io.modelcontextprotocol/clientInfo":{"name":"raw-test","version":"1"}}`, caps)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crm_connect","arguments":{}%s,%s}}`, extra, meta)
	return post(t, url, withToken(headers("tools/call", "crm_connect"), token), body)
}

// connectAsked is the consent a call of crm_connect asks of a caller that
// can be asked: the link, and the retry's params.
func connectAsked(t *testing.T, r *rawResponse) asked {
	t.Helper()
	var res struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string `json:"method"`
			Params struct{ Mode, URL, Message string }
		} `json:"inputRequests"`
		RequestState string `json:"requestState"`
	}
	r.result(t, &res)
	if res.ResultType != "input_required" || len(res.InputRequests) != 1 || res.RequestState == "" {
		t.Fatalf("crm_connect before consent (HTTP %d): %s", r.Status, r.Body)
	}
	for k, q := range res.InputRequests {
		if q.Method != "elicitation/create" || q.Params.Mode != "url" || !strings.Contains(q.Params.URL, "/oauth/connect?state=") || q.Params.Message == "" {
			t.Fatalf("crm_connect asked %+v", q)
		}
		return asked{link: q.Params.URL, key: k, state: res.RequestState}
	}
	return asked{}
}

// connected checks that the retry of a consent given answers that the
// account is connected.
func connected(t *testing.T, url, token string, a asked) {
	t.Helper()
	var res callResult
	connectCall(t, url, token, canOpenURLs, a.retry()).result(t, &res)
	if res.ResultType != "complete" || len(res.Content) != 1 || !strings.Contains(res.Content[0].Text, "connected") {
		t.Fatalf("crm_connect after consent: %+v", res)
	}
}

// listens opens a stream of token's caller on url's tools list changes,
// acknowledged.
func listens(t *testing.T, url, token string, id int) *sseStream {
	t.Helper()
	s := listen(t, url, id, `{"toolsListChanged":true}`, "Authorization", "Bearer "+token)
	if s.Status != http.StatusOK {
		t.Fatalf("listen: HTTP %d", s.Status)
	}
	s.expect(t, id, "notifications/subscriptions/acknowledged", "")
	return s
}

// Alice and Bob each hold a subscriptions/listen stream; Alice calls
// crm_connect and consents in the browser: her stream is told, within
// seconds, that the tools list changed, Bob's is told nothing, and her
// retry says her account is connected.
func TestOAuthConnectToldOnListenStream(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	alice, bob := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"})
	aliceStream, bobStream := listens(t, p.URL, alice, 7), listens(t, p.URL, bob, 8)

	a := connectAsked(t, connectCall(t, p.URL, alice, canOpenURLs, ""))
	if status, page := consentAs(t, a.link, "alice-at-crm"); status != http.StatusOK {
		t.Fatalf("the callback answered %d: %s", status, page)
	}
	aliceStream.expect(t, 7, "notifications/tools/list_changed", "")
	bobStream.quiet(t, 2*time.Second, "bob, who consented to nothing, after alice's consent")
	connected(t, p.URL, alice, a)
}

// Two replicas share a Redis: Alice listens on replica a, calls
// crm_connect there, and the authorization server sends her browser back
// to the public_url, replica b, whose callback completes the consent. Her
// stream on a is told the tools list changed all the same (and her stream
// on b); Bob's stream on a is told nothing.
func TestOAuthConnectToldAcrossReplicas(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	rs := redistest.Start(t)
	a, b := twoReplicas(t, is, as, fmt.Sprintf("cache: {secret: s3cret-0123456789, redis: {url: %s}}\n", rs.URL()))
	alice, bob := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"})
	onA, onB, bobOnA := listens(t, a.URL, alice, 7), listens(t, b.URL, alice, 9), listens(t, a.URL, bob, 8)

	asked := connectAsked(t, connectCall(t, a.URL, alice, canOpenURLs, ""))
	if !strings.HasPrefix(asked.link, strings.TrimSuffix(b.URL, "/mcp")+"/oauth/connect?") {
		t.Fatalf("the link %s is not the public_url's (b, %s)", asked.link, b.URL)
	}
	if status, page := consentAs(t, asked.link, "alice-at-crm"); status != http.StatusOK {
		t.Fatalf("b's callback answered %d: %s", status, page)
	}
	onB.expect(t, 9, "notifications/tools/list_changed", "")
	onA.expect(t, 7, "notifications/tools/list_changed", "")
	bobOnA.quiet(t, 2*time.Second, "bob, on a, after alice's consent on b")
	connected(t, a.URL, alice, asked)
}

// crm_connect's answers before consent, raw: a 2026-07-28 caller that
// declared no URL elicitation gets -32021 (HTTP 400) naming the
// capability it lacks and its own consent link; one that declared it is
// asked input_required, one URL-mode elicitation/create, never -32042;
// a 2025-11-25 session that cannot be asked gets -32042 with the link.
// Each link is its caller's: followed, it authorizes that caller, whose
// crm_connect then completes, and nobody else.
func TestOAuthConnectToolAnswersRaw(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	alice, bob, carol := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"}), is.mint("rsa-1", claims{"sub": "carol"})

	r := connectCall(t, p.URL, alice, noCaps, "")
	r.wantError(t, http.StatusBadRequest, -32021)
	var data struct {
		RequiredCapabilities map[string]map[string]any `json:"requiredCapabilities"`
		URL                  string                    `json:"url"`
	}
	if err := json.Unmarshal(r.Error.Data, &data); err != nil || data.RequiredCapabilities["elicitation"]["url"] == nil ||
		!strings.Contains(data.URL, "/oauth/connect?state=") || !strings.Contains(r.Error.Message, data.URL) {
		t.Fatalf("-32021 of a caller that cannot be asked: %s", r.Body)
	}
	aliceLink := data.URL

	b := connectAsked(t, connectCall(t, p.URL, bob, canOpenURLs, ""))
	if strings.Contains(string(connectCall(t, p.URL, bob, canOpenURLs, "").Body), "-32042") {
		t.Errorf("a 2026-07-28 caller was answered -32042")
	}
	if b.link == aliceLink || stateOf(t, b.link) == stateOf(t, aliceLink) {
		t.Fatalf("bob was shown alice's link %s", b.link)
	}

	h := http.Header(withToken(http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}, carol))
	init := post(t, p.URL, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	h.Set("Mcp-Session-Id", init.Header.Get("Mcp-Session-Id"))
	h.Set("MCP-Protocol-Version", "2025-11-25")
	legacy := post(t, p.URL, h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"crm_connect","arguments":{}}}`)
	if legacy.Error == nil || legacy.Error.Code != -32042 || !strings.Contains(string(legacy.Error.Data), `"mode":"url"`) ||
		!strings.Contains(string(legacy.Error.Data), "/oauth/connect?state=") || strings.Contains(string(legacy.Error.Data), stateOf(t, aliceLink)) {
		t.Errorf("a 2025-11-25 session that cannot be asked: %s", legacy.Body)
	}

	// Alice's link authorizes Alice: her crm_connect now completes at
	// once, and Bob is still asked.
	if status, page := consentAs(t, aliceLink, "alice-at-crm"); status != http.StatusOK {
		t.Fatalf("alice's consent: the callback answered %d: %s", status, page)
	}
	var res callResult
	connectCall(t, p.URL, alice, noCaps, "").result(t, &res)
	if res.ResultType != "complete" || len(res.Content) != 1 || !strings.Contains(res.Content[0].Text, "connected") {
		t.Errorf("alice's crm_connect after her consent: %+v", res)
	}
	connectAsked(t, connectCall(t, p.URL, bob, canOpenURLs, ""))
	if got := whoami(t, p.URL, alice, ""); got.text != "you are alice-at-crm" {
		t.Errorf("alice's crm_whoami: %+v", got)
	}
}

// describedProxy is a Manifold trusting is for its callers, with as's
// server as its upstream crm (oauth mode user) and extra keys of crm.
func describedProxy(t *testing.T, is *issuer, as *authServer, extra string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf("public_url: http://%s\n%shealth: {probe_interval: 1s}\nupstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user}\n%s",
		l.Addr(), is.authYAML(""), as.MCP, extra)
	cfg, problems := config.Parse([]byte(yaml), os.LookupEnv)
	if len(problems) > 0 {
		t.Fatalf("config: %v\n%s", problems, yaml)
	}
	return startProxyOn(t, cfg, l)
}

// connectDescription is the description of crm_connect in the list
// token's caller is shown, the list holding nothing else.
func connectDescription(t *testing.T, url, token string) string {
	t.Helper()
	r := post(t, url, withToken(headers("tools/list", ""), token), `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{`+oauthMeta+`}}`)
	var list struct {
		Tools []struct{ Name, Description string } `json:"tools"`
	}
	r.result(t, &list)
	if len(list.Tools) != 1 || list.Tools[0].Name != "crm_connect" {
		t.Fatalf("before consent, the list: %s", r.Body)
	}
	return list.Tools[0].Description
}

// crm_connect's description, from each of its sources in turn: the
// operator's description key; else the server's name and instructions as
// its server/discover tells them to a request without a token (the server
// challenges every other); else a sentence naming the upstream.
func TestOAuthConnectToolDescription(t *testing.T) {
	is := newIssuer(t)
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	const instructions = "Customers, deals and the notes of every call."
	described := func(t *testing.T) *authServer {
		as := newAuthServerOf(t, func(*authServer) http.Handler {
			s := mcp.NewServer(&mcp.Implementation{Name: "Acme CRM", Version: "7"}, &mcp.ServerOptions{Instructions: instructions})
			s.AddTool(&mcp.Tool{Name: "whoami", InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return textResult("you"), nil
			})
			return modernHandler(s)
		})
		as.mu.Lock()
		as.openDiscover = true
		as.mu.Unlock()
		return as
	}

	t.Run("key", func(t *testing.T) {
		p := describedProxy(t, is, described(t), "    description: Our customer records, in Acme.\n")
		time.Sleep(1500 * time.Millisecond) // a knock or more, which the key outranks
		if got := connectDescription(t, p.URL, alice); got != "Our customer records, in Acme." {
			t.Errorf("with a description key: %q", got)
		}
	})
	t.Run("discover", func(t *testing.T) {
		p := describedProxy(t, is, described(t), "")
		eventually(t, 5*time.Second, func() error {
			if got := connectDescription(t, p.URL, alice); !strings.Contains(got, "Acme CRM: "+instructions) || !strings.Contains(got, "crm") {
				return fmt.Errorf("learnt from server/discover: %q", got)
			}
			return nil
		})
	})
	t.Run("neither", func(t *testing.T) {
		p := describedProxy(t, is, newAuthServer(t), "")
		time.Sleep(1500 * time.Millisecond) // a knock or more, answered 401
		if got := connectDescription(t, p.URL, alice); !strings.HasPrefix(got, "Connect your crm account to Manifold.") {
			t.Errorf("with nothing to tell: %q", got)
		}
	})
}

// Per-principal lists are each principal's own: Alice consented and her
// lists hold crm's tool, prompt and resource, which the server says
// are fresh for a minute, private; Bob, who consented to
// nothing, lists after her and is shown crm_connect alone, and not one
// name, URI or description of hers, whatever the list.
func TestOAuthListsAreThePrincipalsOwn(t *testing.T) {
	is := newIssuer(t)
	as := newAuthServerOf(t, func(*authServer) http.Handler {
		// Lists a minute fresh, each for its own user's token.
		s := mcp.NewServer(&mcp.Implementation{Name: "crm", Version: "1"}, &mcp.ServerOptions{
			SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs, c.CacheScope = 60_000, "private" },
		})
		s.AddTool(&mcp.Tool{Name: "whoami", InputSchema: objectSchema(`{}`)}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return textResult("you are " + req.Extra.Header.Get("X-Token-User")), nil
		})
		s.AddPrompt(&mcp.Prompt{Name: "acme-renewal-pitch", Description: "the Acme renewal"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		})
		s.AddResource(&mcp.Resource{URI: "crm://deals/acme-renewal", Name: "acme-renewal-deal"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "crm://deals/acme-renewal", Text: "1M"}}}, nil
		})
		s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "crm://accounts/{acmeAccount}", Name: "acme-accounts"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{}, nil
		})
		return modernHandler(s)
	})
	p := oauthProxy(t, is, as, "")
	alice, bob := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"})
	if got := authorize(t, p.URL, alice, "alice-at-crm"); got != "you are alice-at-crm" {
		t.Fatalf("alice after consent: %q", got)
	}
	lists := []string{"tools/list", "prompts/list", "resources/list", "resources/templates/list"}
	list := func(token, method string) string {
		return string(post(t, p.URL, withToken(headers(method, ""), token), `{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":{`+oauthMeta+`}}`).Body)
	}
	var hers string
	for _, m := range lists {
		hers += list(alice, m)
	}
	for _, name := range []string{"crm_whoami", "acme-renewal-pitch", "acme-renewal-deal", "acme-accounts"} {
		if !strings.Contains(hers, name) {
			t.Fatalf("alice's lists hold no %s: %s", name, hers)
		}
	}
	connectDescription(t, p.URL, bob) // crm_connect alone
	for _, m := range lists {
		body := list(bob, m)
		if strings.Contains(body, "acme") || strings.Contains(body, "whoami") {
			t.Errorf("bob's %s shows what alice's holds: %s", m, body)
		}
	}
}

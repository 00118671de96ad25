package test

import (
	"context"

	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/redistest"
)

// Manifold as the OAuth client of a protected upstream (oauth mode user),
// against the test's own authorization server and MCP server.

// oauthMeta declares that the caller can be asked to open a URL.
const oauthMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"url":{}}}}`

// oauthProxy is a Manifold trusting is for its callers, with as's server as
// its upstream crm, and extra configuration before the upstreams. Its
// public_url is its own address.
func oauthProxy(t *testing.T, is *issuer, as *authServer, extra string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return oauthProxyOn(t, l, "http://"+l.Addr().String(), is, as, extra)
}

func oauthProxyOn(t *testing.T, l net.Listener, public string, is *issuer, as *authServer, extra string) *proxy {
	t.Helper()
	yaml := fmt.Sprintf("public_url: %s\n%s%supstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user}\n", public, is.authYAML(""), extra, as.MCP)
	cfg, problems := config.Parse([]byte(yaml), os.LookupEnv)
	if len(problems) > 0 {
		t.Fatalf("config: %v\n%s", problems, yaml)
	}
	return startProxyOn(t, cfg, l)
}

// asked is an answer to a call: its text when it completed, else the
// authorization URL it asks to open and what to retry with.
type asked struct {
	text, link, key, state string
	errCode                int64
	errMsg                 string
}

// whoami calls crm_whoami as the caller of token, with extra params.
func whoami(t *testing.T, url, token, extra string) asked {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"crm_whoami","arguments":{}%s,%s}}`, extra, oauthMeta)
	r := post(t, url, withToken(headers("tools/call", "crm_whoami"), token), body)
	if r.Error != nil {
		return asked{errCode: r.Error.Code, errMsg: r.Error.Message}
	}
	var res struct {
		ResultType    string `json:"resultType"`
		InputRequests map[string]struct {
			Method string `json:"method"`
			Params struct {
				Mode, URL string
			} `json:"params"`
		} `json:"inputRequests"`
		RequestState string `json:"requestState"`
		Content      []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	r.result(t, &res)
	if res.ResultType == "complete" {
		return asked{text: res.Content[0].Text}
	}
	for k, q := range res.InputRequests {
		if q.Method != "elicitation/create" || q.Params.Mode != "url" {
			t.Fatalf("asked %+v", q)
		}
		return asked{link: q.Params.URL, key: k, state: res.RequestState}
	}
	t.Fatalf("input_required without a question: %s", r.Body)
	return asked{}
}

// retry is the retry of a consent the user accepted.
func (a asked) retry() string {
	return fmt.Sprintf(`,"requestState":%q,"inputResponses":{%q:{"action":"accept"}}`, a.state, a.key)
}

// consentAs is the user's browser: it opens link, Manifold's page, and
// clicks through (a POST of its form) to the authorization server, as user
// (the test authorization server approves at once), and follows the
// redirect to Manifold's callback; it returns the callback's status and
// its page, or the page's when it went no further.
func consentAs(t *testing.T, link, user string) (int, string) {
	t.Helper()
	if status, page := get(t, link); status != http.StatusOK {
		return status, page
	}
	req, _ := http.NewRequest(http.MethodPost, link, strings.NewReader(url.Values{"state": {stateOf(t, link)}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Test-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// authorize takes token's caller through the consent as user, and returns
// what the retry answered.
func authorize(t *testing.T, url, token, user string) string {
	t.Helper()
	first := whoami(t, url, token, "")
	if first.link == "" {
		t.Fatalf("not asked to consent: %+v", first)
	}
	if status, page := consentAs(t, first.link, user); status != http.StatusOK {
		t.Fatalf("the callback answered %d: %s", status, page)
	}
	return whoami(t, url, token, first.retry()).text
}

// Two principals are each asked for their own consent, and each call goes
// with its own principal's token, never the other's; a principal's retry
// with the other's requestState is refused; and the caller's own token is
// never what reaches the upstream.
func TestOAuthTokensPerPrincipal(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	alice, bob := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"})
	if got := authorize(t, p.URL, alice, "alice-at-crm"); got != "you are alice-at-crm" {
		t.Fatalf("alice after consent: %q", got)
	}
	asked := whoami(t, p.URL, bob, "")
	if asked.link == "" {
		t.Fatalf("bob was not asked for his own consent: %+v", asked)
	}
	if cross := whoami(t, p.URL, alice, asked.retry()); cross.errCode != -32602 {
		t.Errorf("alice with bob's requestState: %+v", cross)
	}
	consentAs(t, asked.link, "bob-at-crm")
	if got := whoami(t, p.URL, bob, asked.retry()).text; got != "you are bob-at-crm" {
		t.Errorf("bob after consent: %q", got)
	}
	for i := 0; i < 3; i++ {
		if a, b := whoami(t, p.URL, alice, "").text, whoami(t, p.URL, bob, "").text; a != "you are alice-at-crm" || b != "you are bob-at-crm" {
			t.Fatalf("round %d: alice %q, bob %q", i, a, b)
		}
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	for _, tok := range as.seen {
		if tok == alice || tok == bob {
			t.Fatal("a caller's own token reached the upstream")
		}
	}
}

// A callback is good once, for the authorization it names, in time: a
// replayed one, a forged state and one whose authorization expired are
// refused with a page that says so, and none reaches the token endpoint;
// the tokens of a consent go to the principal the authorization was made
// for, and nobody else.
func TestOAuthCallbackRefused(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	rs := redistest.Start(t)
	p := oauthProxy(t, is, as, fmt.Sprintf("cache: {secret: s3cret-0123456789, redis: {url: %s}}\n", rs.URL()))
	alice, bob := is.mint("rsa-1", claims{"sub": "alice"}), is.mint("rsa-1", claims{"sub": "bob"})
	first := whoami(t, p.URL, alice, "")
	if first.link == "" {
		t.Fatalf("not asked to consent: %+v", first)
	}
	callback := callbackOf(t, first.link, "alice-at-crm")
	if status, _ := get(t, callback); status != http.StatusOK {
		t.Fatalf("the callback answered %d", status)
	}
	exchanges, _ := as.counts()
	if status, page := get(t, callback); status != http.StatusBadRequest || !strings.Contains(page, "could not be completed") {
		t.Errorf("a replayed callback: %d %s", status, page)
	}
	forged := strings.Replace(callback, "state=", "state=x", 1)
	if status, _ := get(t, forged); status != http.StatusBadRequest {
		t.Errorf("a forged state: %d", status)
	}
	carol := is.mint("rsa-1", claims{"sub": "carol"})
	late := whoami(t, p.URL, carol, "")
	expireAll(t, rs, "oauth:pend:")
	if status, _ := consentAs(t, late.link, "carol-at-crm"); status != http.StatusBadRequest {
		t.Errorf("a callback after its authorization expired: %d", status)
	}
	if now, _ := as.counts(); now != exchanges {
		t.Errorf("refused callbacks made %d token requests", now-exchanges)
	}
	if got := whoami(t, p.URL, alice, first.retry()).text; got != "you are alice-at-crm" {
		t.Errorf("alice's retry: %q", got)
	}
	if got := whoami(t, p.URL, bob, ""); got.link == "" {
		t.Errorf("bob was served alice's consent: %+v", got)
	}
}

// callbackOf clicks through link's page to the authorization server, as
// user, and returns where it sends the browser back: the callback, with
// its code and state, not opened yet.
func callbackOf(t *testing.T, link, user string) string {
	t.Helper()
	resp, page := fetchPage(t, http.MethodPost, link, nil, url.Values{"state": {stateOf(t, link)}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the consent page's form answered %d: %s", resp.StatusCode, page)
	}
	resp, page = fetchPage(t, http.MethodGet, resp.Header.Get("Location"), http.Header{"X-Test-User": {user}}, nil)
	callback := resp.Header.Get("Location")
	if callback == "" {
		t.Fatalf("the authorization answered %d: %s", resp.StatusCode, page)
	}
	return callback
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// expireAll makes every key of Redis with prefix in its name expire now.
func expireAll(t *testing.T, rs *redistest.Server, prefix string) {
	t.Helper()
	ctx := context.Background()
	keys, _ := rs.Client().Keys(ctx, "*"+prefix+"*").Result()
	if len(keys) == 0 {
		t.Fatalf("no key with %s in Redis", prefix)
	}
	for _, k := range keys {
		rs.Client().Del(ctx, k)
	}
}

// twoReplicas starts two Manifolds of one configuration (extra names
// the Redis they share), whose public_url is b's: a consent asked on a
// completes on b's callback, as behind one load balancer.
func twoReplicas(t *testing.T, is *issuer, as *authServer, extra string) (a, b *proxy) {
	lb, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b = oauthProxyOn(t, lb, "http://"+lb.Addr().String(), is, as, extra)
	la, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return oauthProxyOn(t, la, "http://"+lb.Addr().String(), is, as, extra), b
}

// Two replicas share the tokens through Redis, sealed there: a consent
// completed on one replica's callback (the authorization server sends the
// user to public_url, the other replica) serves the caller on both, and a
// dump of Redis holds neither the access token nor the refresh token.
func TestOAuthTokensSharedAndSealed(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	rs := redistest.Start(t)
	extra := fmt.Sprintf("cache: {secret: s3cret-0123456789, redis: {url: %s}}\n", rs.URL())
	a, b := twoReplicas(t, is, as, extra)
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	if got := authorize(t, a.URL, alice, "alice-at-crm"); got != "you are alice-at-crm" {
		t.Fatalf("on a, after a consent completed on b: %q", got)
	}
	if got := whoami(t, b.URL, alice, ""); got.text != "you are alice-at-crm" {
		t.Errorf("on b: %+v", got)
	}
	keys, _ := rs.Client().Keys(context.Background(), "*").Result()
	for _, k := range keys {
		v := redisValue(t, rs, k)
		if strings.Contains(v, "at-alice") || strings.Contains(v, "rt-alice") {
			t.Errorf("Redis holds a token in clear under %s", k)
		}
	}
}

// A token is refreshed before it expires, and after the server refuses it,
// without asking the user; when the refresh itself is refused, the user is
// asked again.
func TestOAuthRefresh(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	as.expiresIn = 3 // due for a refresh at four fifths of its lifetime
	p := oauthProxy(t, is, as, "")
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	authorize(t, p.URL, alice, "alice-at-crm")
	eventually(t, 10*time.Second, func() error {
		if got := whoami(t, p.URL, alice, ""); got.text != "you are alice-at-crm" {
			return fmt.Errorf("not served: %+v", got)
		}
		if _, refreshes := as.counts(); refreshes == 0 {
			return fmt.Errorf("not refreshed ahead of expiry yet")
		}
		return nil
	})
	as.mu.Lock()
	as.expiresIn = 3600
	as.mu.Unlock()
	whoami(t, p.URL, alice, "")
	_, before := as.counts()
	as.revoke("alice-at-crm", false)
	if got := whoami(t, p.URL, alice, ""); got.text != "you are alice-at-crm" {
		t.Errorf("after the server refused the token: %+v", got)
	}
	if _, after := as.counts(); after != before+1 {
		t.Errorf("%d refreshes after a 401, want 1", after-before)
	}
	as.revoke("alice-at-crm", true)
	if got := whoami(t, p.URL, alice, ""); got.link == "" {
		t.Errorf("with the refresh refused too, the user was not asked again: %+v", got)
	}
}

// A reload that changes an upstream's oauth drops the tokens it had: the
// user is asked again.
func TestOAuthReloadDropsTokens(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	public := "http://" + l.Addr().String()
	yaml := func(scopes string) string {
		return fmt.Sprintf("public_url: %s\n%supstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user, scopes: [%s]}\n", public, is.authYAML(""), as.MCP, scopes)
	}
	path := writeConfig(t, yaml("crm:read"))
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxyOn(t, cfg, l)
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	authorize(t, p.URL, alice, "alice-at-crm")
	if got := whoami(t, p.URL, alice, ""); got.text == "" {
		t.Fatalf("authorized: %+v", got)
	}
	if err := os.WriteFile(path, []byte(yaml("crm:read, crm:write")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := whoami(t, p.URL, alice, ""); got.link == "" {
		t.Errorf("after a reload that changed oauth, the old token served: %+v", got)
	}
}

// bearerTransport adds a caller's token to each request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// A 2025-11-25 caller that can be asked to open a URL (the go-sdk client,
// declaring URL elicitation) is asked on its session with an
// elicitation/create in URL mode, and its call completes once its user
// consented; one that cannot gets -32042 naming the URL.
func TestOAuthLegacyCaller(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	var asked string
	c := mcp.NewClient(&mcp.Implementation{Name: "legacy-agent", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = req.Params.Mode
			consentAs(t, req.Params.URL, "alice-at-crm")
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.URL, HTTPClient: &http.Client{Transport: bearerTransport{alice}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "crm_whoami"})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "you are alice-at-crm" || asked != "url" {
		t.Fatalf("the legacy caller's call: %v %+v (asked in mode %q)", err, res, asked)
	}

	// Without URL elicitation: -32042, raw.
	bob := is.mint("rsa-1", claims{"sub": "bob"})
	h := http.Header(withToken(http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}, bob))
	init := post(t, p.URL, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	h.Set("Mcp-Session-Id", init.Header.Get("Mcp-Session-Id"))
	h.Set("MCP-Protocol-Version", "2025-11-25")
	r := post(t, p.URL, h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"crm_whoami","arguments":{}}}`)
	if r.Error == nil || r.Error.Code != -32042 || !strings.Contains(string(r.Error.Data), `"mode":"url"`) || !strings.Contains(string(r.Error.Data), "/oauth/connect?state=") {
		t.Errorf("a legacy caller that cannot be asked: %s", r.Body)
	}
}

// A server reached with each caller's own token is never spoken to in a
// legacy era on the callers' behalf: a session of the caller's revision
// (upstream/era.go) is one per revision, negotiated with whichever
// caller's token came first and used for every caller after, so the
// server would see one user's session carry another's calls. Two
// 2025-11-25 callers that take no questions, each consented, each get
// their own answer, and every request reaches the server in 2026-07-28,
// which has no session, with its own caller's token.
func TestOAuthCallersShareNoSession(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	users := map[string]string{"alice": "alice-at-crm", "bob": "bob-at-crm"}
	tokens := map[string]string{}
	for who, user := range users {
		tokens[who] = is.mint("rsa-1", claims{"sub": who})
		if got := authorize(t, p.URL, tokens[who], user); got != "you are "+user {
			t.Fatalf("%s after consent: %q", who, got)
		}
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"crm_whoami","arguments":{}}}`
	for round := 0; round < 2; round++ {
		for who, user := range users {
			h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
			withToken(h, tokens[who])
			init := post(t, p.URL, h, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
			h.Set("Mcp-Session-Id", init.Header.Get("Mcp-Session-Id"))
			h.Set("MCP-Protocol-Version", "2025-11-25")
			var res callResult
			post(t, p.URL, h, call).result(t, &res)
			if len(res.Content) != 1 || res.Content[0].Text != "you are "+user {
				t.Fatalf("round %d, %s's 2025-11-25 call: %+v", round, who, res)
			}
		}
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	if len(as.legacyBy) > 0 {
		t.Errorf("the server got requests in a legacy era, as %v: a session negotiated as one caller serves all", as.legacyBy)
	}
}

// A server that keeps sessions, each bound to the user whose token opened
// it (the go-sdk refuses another user's request in it, 403), is spoken to
// in a session of each caller's own: every principal that consented is
// answered as its own user, in turn and again, and no session the server
// opened is used with two users' tokens.
func TestOAuthSessionPerPrincipal(t *testing.T) {
	iss, as := newIssuer(t), newSessionAuthServer(t)
	p := oauthProxy(t, iss, as, "")
	users := []struct{ who, user string }{{"alice", "alice-at-crm"}, {"bob", "bob-at-crm"}, {"carol", "carol-at-crm"}}
	tokens := map[string]string{}
	for _, u := range users {
		tokens[u.who] = iss.mint("rsa-1", claims{"sub": u.who})
		first := whoami(t, p.URL, tokens[u.who], "")
		if first.link == "" {
			t.Fatalf("%s not asked to consent: %+v", u.who, first)
		}
		consentAs(t, first.link, u.user)
		if got := whoami(t, p.URL, tokens[u.who], first.retry()); got.text != "you are "+u.user {
			t.Fatalf("%s after consent: %+v", u.who, got)
		}
	}
	for round := 0; round < 3; round++ {
		for _, u := range users {
			if got := whoami(t, p.URL, tokens[u.who], ""); got.text != "you are "+u.user {
				t.Fatalf("round %d, %s: %+v", round, u.who, got)
			}
		}
	}
}

// A caller asked to consent is shown a link made for it alone, never the
// one made for another caller whose call was under way at the same
// moment: a link's authorization belongs to the principal it was made
// for, so a user who followed another's would give that principal their
// account. Alice's first call is held at the server's resource metadata;
// Bob calls meanwhile; each is then shown its own link.
func TestOAuthConsentLinkIsTheCallersOwn(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	gate := make(chan struct{})
	as.mu.Lock()
	as.gate = gate
	as.mu.Unlock()
	links := map[string]chan asked{"alice": make(chan asked, 1), "bob": make(chan asked, 1)}
	tokens := map[string]string{"alice": is.mint("rsa-1", claims{"sub": "alice"}), "bob": is.mint("rsa-1", claims{"sub": "bob"})}
	call := func(who string) {
		links[who] <- whoami(t, p.URL, tokens[who], "")
	}
	waitHeld := func(n int32, within time.Duration) {
		for deadline := time.Now().Add(within); as.held.Load() < n && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	go call("alice")
	waitHeld(1, 10*time.Second)
	go call("bob")
	waitHeld(2, 5*time.Second) // Bob's own discovery; without one, time enough for him to wait on Alice's
	// A moment for Bob's request to reach whatever it waits on: nothing a
	// test can see tells that it has.
	time.Sleep(100 * time.Millisecond)
	close(gate)
	a, b := <-links["alice"], <-links["bob"]
	if a.link == "" || b.link == "" {
		t.Fatalf("not both asked to consent: alice %+v, bob %+v", a, b)
	}
	if a.link == b.link {
		t.Fatalf("bob was shown alice's consent link: %s", b.link)
	}
	// Bob's link, followed, authorizes Bob, and Alice is still asked.
	if status, page := consentAs(t, b.link, "bob-at-crm"); status != http.StatusOK {
		t.Fatalf("bob's consent: the callback answered %d: %s", status, page)
	}
	if got := whoami(t, p.URL, tokens["bob"], b.retry()); got.text != "you are bob-at-crm" {
		t.Errorf("bob after his consent: %+v", got)
	}
	if again := whoami(t, p.URL, tokens["alice"], ""); again.link == "" {
		t.Errorf("alice was not asked again after bob consented: %+v", again)
	}
}

// A stopped Manifold leaves no connection to the Redis its OAuth clients
// keep their tokens in (nor to any other): a process embedding it, or a
// test suite starting many, would otherwise run out of them.
func TestOAuthStoreClosedOnStop(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	rs := redistest.Start(t)
	p := oauthProxy(t, is, as, fmt.Sprintf("cache: {secret: s3cret-0123456789, redis: {url: %s}}\n", rs.URL()))
	alice := is.mint("rsa-1", claims{"sub": "alice"})
	if got := authorize(t, p.URL, alice, "alice-at-crm"); got != "you are alice-at-crm" {
		t.Fatalf("authorize: %q", got)
	}
	p.stop()
	probe := rs.Client()
	eventually(t, 5*time.Second, func() error {
		list, err := probe.ClientList(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if clients := strings.Count(list, "\n"); clients > 1 { // the probe's own
			return fmt.Errorf("a stopped Manifold keeps %d connections to Redis:\n%s", clients-1, list)
		}
		return nil
	})
}

package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A consent link opens a page of Manifold's that names the upstream and the
// principal it connects ("Connect crm for alice@example.com"), so that a
// link forwarded to someone else shows whose it is; only a click on it
// goes on to the authorization server. In a real browser: open the link,
// read the names, click, sign in (the test server approves at once),
// arrive at the callback; the call then succeeds.
func TestOAuthConnectPageInBrowser(t *testing.T) {
	chromium := findChromium(t)
	is, as := newIssuer(t), newAuthServer(t)
	as.signedIn = "alice-at-crm"
	p := oauthProxy(t, is, as, "")
	alice := is.mint("rsa-1", claims{"sub": "alice", "email": "alice@example.com"})
	first := whoami(t, p.URL, alice, "")
	if first.link == "" {
		t.Fatalf("not asked to consent: %+v", first)
	}
	ctx := browser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.Navigate(first.link), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
		t.Fatalf("open the link: %v", err)
	}
	page := shownConnect(t, ctx)
	if page.Heading != "Connect crm for alice@example.com" {
		t.Errorf("the page's heading is %q; want it to name the upstream and the principal (%+v)", page.Heading, page)
	}
	if n := as.authorizationCount(); n != 0 {
		t.Fatalf("opening the link reached the authorization server %d times, before any click", n)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("form button"))); err != nil {
		t.Fatalf("click: %v", err)
	}
	eventually(t, 15*time.Second, func() error { // the page navigates, twice: read it again until it is there
		page, err := readConnect(ctx)
		if err == nil && (page.Heading != "Authorized" || !strings.Contains(page.At, "/oauth/callback")) {
			err = fmt.Errorf("the browser shows %+v", page)
		}
		return err
	})
	if n := as.authorizationCount(); n != 1 {
		t.Errorf("the click made %d authorization requests", n)
	}
	if got := whoami(t, p.URL, alice, first.retry()); got.text != "you are alice-at-crm" {
		t.Errorf("alice's retry: %+v", got)
	}
}

// The consent page over raw HTTP: a GET (a prefetch, a link preview) shows
// the page and never reaches the authorization server; the page is not to
// be cached, framed or referred from, and escapes what it names; its form
// POSTs, answered 303 to the authorization server; a POST from another
// site is refused; an unknown or spent state is a clear 400.
func TestOAuthConnectPageWire(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	mallory := is.mint("rsa-1", claims{"sub": "mallory", "email": `<b>mallory</b>"@example.com`})
	first := whoami(t, p.URL, mallory, "")
	if first.link == "" {
		t.Fatalf("not asked to consent: %+v", first)
	}
	resp, body := fetchPage(t, http.MethodGet, first.link, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the link: %d %s", resp.StatusCode, body)
	}
	h := resp.Header
	if h.Get("Cache-Control") != "no-store" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Frame-Options") != "DENY" ||
		!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Errorf("the page's headers: %v", h)
	}
	if strings.Contains(body, "<b>mallory") || !strings.Contains(body, "&lt;b&gt;mallory&lt;/b&gt;&#34;@example.com") {
		t.Errorf("the principal's name is not escaped: %s", body)
	}
	if !strings.Contains(body, `method="post"`) {
		t.Errorf("no form posting on: %s", body)
	}
	if n := as.authorizationCount(); n != 0 {
		t.Fatalf("a GET of the page reached the authorization server %d times", n)
	}
	state := stateOf(t, first.link)
	cross := http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}}
	if resp, body := fetchPage(t, http.MethodPost, first.link, cross, url.Values{"state": {state}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a POST from another site: %d %s", resp.StatusCode, body)
	}
	resp, body = fetchPage(t, http.MethodPost, first.link, nil, url.Values{"state": {state}})
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, as.URL+"/authorize?") || stateOf(t, loc) != state {
		t.Fatalf("the click: %d, Location %q: %s", resp.StatusCode, loc, body)
	}
	if status, page := consentAs(t, first.link, "mallory-at-crm"); status != http.StatusOK {
		t.Fatalf("the consent: %d %s", status, page)
	}
	for name, link := range map[string]string{"spent": first.link, "unknown": strings.Replace(first.link, "state=", "state=x", 1)} {
		resp, body := fetchPage(t, http.MethodGet, link, nil, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "expired or was used") {
			t.Errorf("GET of a %s state: %d %s", name, resp.StatusCode, body)
		}
		resp, body = fetchPage(t, http.MethodPost, link, nil, url.Values{"state": {stateOf(t, link)}})
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
			t.Errorf("POST of a %s state: %d %s", name, resp.StatusCode, body)
		}
	}
}

// connectShown is what the browser shows: the heading, the text, where.
type connectShown struct{ Heading, Text, At string }

func shownConnect(t *testing.T, ctx context.Context) connectShown {
	t.Helper()
	p, err := readConnect(ctx)
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	return p
}

func readConnect(ctx context.Context) (connectShown, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[connectShown](
		`({Heading: document.querySelector("h1") ? document.querySelector("h1").innerText : "", Text: document.body ? document.body.innerText : "", At: location.href})`))
}

// fetchPage sends method to link, with form as its body when given, and
// follows no redirect.
func fetchPage(t *testing.T, method, link string, h http.Header, form url.Values) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, link, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// stateOf is the state a link carries.
func stateOf(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil || u.Query().Get("state") == "" {
		t.Fatalf("no state in %q", link)
	}
	return u.Query().Get("state")
}

func (a *authServer) authorizationCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.authorizations
}

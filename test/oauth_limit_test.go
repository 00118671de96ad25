package test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// /oauth/callback and the consent page are open to anyone, so a flood of
// bad requests from one address is limited there and summarized in the
// log: 500 forged callbacks and 500 forged consent pages get mostly 429s
// (with Retry-After), a few log lines, not one each, and no token request;
// meanwhile a user at another address opens their link, clicks through
// and is called back, and their call succeeds.
func TestOAuthPagesLimitedPerAddress(t *testing.T) {
	is, as := newIssuer(t), newAuthServer(t)
	p := oauthProxy(t, is, as, "")
	base := strings.TrimSuffix(p.URL, "/mcp")
	for _, path := range []string{"/oauth/callback?code=c&state=forged-", "/oauth/connect?state=forged-"} {
		statuses := flood(t, base+path, 500)
		if statuses[http.StatusTooManyRequests] < 400 || statuses[http.StatusBadRequest]+statuses[http.StatusTooManyRequests] != 500 {
			t.Errorf("500 forged requests of %s: %v; want 400 each until the limit, 429 past it", path, statuses)
		}
	}
	for _, what := range []string{"oauth callback", "oauth consent page"} {
		if n := strings.Count(p.Logs.String(), `msg="`+what); n == 0 || n > 3 {
			t.Errorf("%d log lines of %q for 500 refusals, want a summary:\n%s", n, what, p.Logs.String())
		}
	}
	if exchanges, _ := as.counts(); exchanges != 0 {
		t.Errorf("forged callbacks made %d token requests", exchanges)
	}

	alice := is.mint("rsa-1", claims{"sub": "alice"})
	first := whoami(t, p.URL, alice, "")
	if first.link == "" {
		t.Fatalf("not asked to consent: %+v", first)
	}
	elsewhere := fromAddress(t, "127.0.0.2")
	for _, step := range []func() (*http.Response, error){
		func() (*http.Response, error) { return elsewhere.Get(first.link) },
		func() (*http.Response, error) {
			req, _ := http.NewRequest(http.MethodPost, first.link, strings.NewReader(url.Values{"state": {stateOf(t, first.link)}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("X-Test-User", "alice-at-crm")
			return elsewhere.Do(req) // on to the authorization server, and back to the callback
		},
	} {
		resp, err := step()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the user at another address: %d at %s: %s", resp.StatusCode, resp.Request.URL.Path, b)
		}
	}
	if got := whoami(t, p.URL, alice, first.retry()); got.text != "you are alice-at-crm" {
		t.Errorf("alice after her consent: %+v", got)
	}
}

// flood GETs link+i, n times, 8 at a time, and counts the statuses; a 429
// must say when to come back.
func flood(t *testing.T, link string, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				resp, err := http.Get(fmt.Sprintf("%s%d", link, i))
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
					t.Error("a 429 without Retry-After")
				}
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return statuses
}

// fromAddress is a client whose connections come from ip (a loopback
// address other than 127.0.0.1: another client, to a server on loopback).
func fromAddress(t *testing.T, ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

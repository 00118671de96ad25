package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// drive sends requests at rate per second from body(i) until stop closes.
func drive(url string, rate int, stop chan struct{}, req func(i int) *http.Request) {
	var wg sync.WaitGroup
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			wg.Wait()
			return
		case <-t.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if resp, err := http.DefaultClient.Do(req(i).WithContext(ctx)); err == nil {
				resp.Body.Close()
			}
		}()
	}
}

func toolRequest(url, name, args string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(rpcBody(1, "tools/call", fmt.Sprintf(`"name":%q,"arguments":%s`, name, args))))
	r.Header = headers("tools/call", name)
	return r
}

// answered waits until method's answers on o's metrics that are ok (or,
// with ok false, errors) have grown by n.
func answered(t *testing.T, o *opsProcess, method string, ok bool, n float64) {
	t.Helper()
	count := func() float64 {
		_, m := o.get(t, "/metrics")
		good := counted(t, m, "manifold_requests_total", "method", method, "code", "ok")
		if ok {
			return good
		}
		return counted(t, m, "manifold_requests_total", "method", method) - good
	}
	base := count()
	eventually(t, 30*time.Second, func() error {
		if got := count() - base; got < n {
			return fmt.Errorf("%v more %s answers (ok %v), want %v", got, method, ok, n)
		}
		return nil
	})
}

// An outage of an upstream under 300 calls a second, long enough for
// hundreds of calls to fail: one line when it starts failing and one when
// it recovers (the issue measured about 200 lines per replica before),
// however many calls failed in between.
func TestOutageLogVolume(t *testing.T) {
	h := sleepyServer()
	a := newSwitchable(t, modernHandler(h.Server))
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", a.URL(), "timeout: 1s"))
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		drive(o.MCP, 300, stop, func(int) *http.Request { return toolRequest(o.MCP, "a_sleep", `{"ms":0}`) })
	}()
	answered(t, o, "tools/call", true, 100)
	a.down()
	answered(t, o, "tools/call", false, 600)
	a.up()
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
	answered(t, o, "tools/call", true, 300) // calls succeed again for a while
	close(stop)
	<-done
	eventually(t, 5*time.Second, func() error {
		if o.logCount("upstream recovered", "upstream=a") != 1 {
			return fmt.Errorf("no recovery line yet")
		}
		return nil
	})
	warns := o.logCount("level=WARN", "upstream=a") + o.logCount("level=ERROR", "upstream=a")
	if failing := o.logCount("upstream failing", "upstream=a"); failing != 1 || warns != 1 {
		t.Errorf("outage logged %d warning lines (%d 'failing'), want 1:\n%s", warns, failing, o.Logs.String())
	}
	if n := o.logCount("upstream recovered", "upstream=a", "failures="); n != 1 {
		t.Errorf("%d recovery lines with a count", n)
	}
}

// Losing Redis under load, then regaining it, is logged once each way.
func TestRedisLossLoggedOnce(t *testing.T) {
	rs := redistest.Start(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	o := startOps(t, fmt.Sprintf("cache: {secret: loss-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL())+httpUpstreamYAML("a", up.URL))
	o.waitReady(t, http.StatusOK, nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		drive(o.MCP, 200, stop, func(i int) *http.Request {
			uri := fmt.Sprintf("a+test://pub/%d", i%50)
			r, _ := http.NewRequest(http.MethodPost, o.MCP, strings.NewReader(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri))))
			r.Header = headers("resources/read", uri)
			return r
		})
	}()
	answered(t, o, "resources/read", true, 100)
	rs.Stop()
	// Until the loss is noticed: only memory hits flow, so it is the 1 s
	// heartbeat's failures (5, by default) that open the breaker.
	eventually(t, 20*time.Second, func() error {
		if o.logCount("redis unavailable") == 0 {
			return fmt.Errorf("the loss of Redis is not noticed yet")
		}
		return nil
	})
	rs.Restart()
	eventually(t, 20*time.Second, func() error {
		if o.logCount("redis recovered") == 0 {
			return fmt.Errorf("not recovered yet")
		}
		return nil
	})
	close(stop)
	<-done
	if lost, back := o.logCount("redis unavailable"), o.logCount("redis recovered"); lost != 1 || back != 1 {
		t.Errorf("Redis lost logged %d times, regained %d times; want once each:\n%s", lost, back, o.Logs.String())
	}
}

// Stale entries standing in for an upstream that is down are counted
// (manifold_cache_stale_served_total), not logged one by one: 30 keys read
// during an outage add no line to the upstream's outage summary.
func TestStaleServedNotLoggedPerRequest(t *testing.T) {
	h := newHintedServer()
	a := newSwitchable(t, modernHandler(h.Server))
	o := startOps(t, "upstreams:"+httpUpstreamYAML("a", a.URL(), "timeout: 1s"))
	o.waitReady(t, http.StatusOK, map[string]string{"a": "ready"})
	uri := func(i int) string { return fmt.Sprintf("a+test://hot/%d", i) }
	for i := range 30 {
		readAs(t, o.MCP, uri(i), "")
	}
	a.down()
	eventually(t, 10*time.Second, func() error { // past the last entry's 2 s freshness
		if text, ttl, _ := readAs(t, o.MCP, uri(29), ""); text == "" || ttl != 0 {
			return fmt.Errorf("read %q with ttlMs %d, want the stale entry", text, ttl)
		}
		return nil
	})
	// All 30 again, the last too: the read that ended the wait may have
	// been a fresh hit in its last millisecond (ttlMs rounds down to 0).
	for i := range 30 {
		if text, ttl, _ := readAs(t, o.MCP, uri(i), ""); text == "" || ttl != 0 {
			t.Fatalf("%s: %q with ttlMs %d, want the stale entry", uri(i), text, ttl)
		}
	}
	if n := o.logCount("stale"); n > 1 {
		t.Errorf("30 stale reads logged %d lines:\n%s", n, o.Logs.String())
	}
	fams := scrapeFamilies(t, o.Admin+"/metrics")
	if v, _ := sample(fams, "manifold_cache_stale_served_total", "upstream", "a"); v < 30 {
		t.Errorf("manifold_cache_stale_served_total = %v, want at least 30", v)
	}
}

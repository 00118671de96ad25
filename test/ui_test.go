package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/manifold-mcp/manifold/internal/redistest"
)

// shownUpstream is one upstream row as the browser renders it.
type shownUpstream struct {
	State, Transport, Era, P50, Calls, Memory, LastError string
	Faded                                                bool // the last error drawn as past
}

// shownPage is what the admin page shows, read from the rendered DOM.
type shownPage struct {
	Ready, Redis, RedisDetail, Refreshed string
	Upstreams                            map[string]shownUpstream
	PageWidth, ViewWidth                 int
	Stacked                              bool // each row a card, header hidden
	// EraLines is the most lines an era (2026-07-28) is drawn on; Overflowing
	// names the elements whose content is wider than they are.
	EraLines    int
	Overflowing []string
	// The totals since start and the last minutes' history.
	Requests, RequestsDetail string
	HistoryBars              int
	HistoryRequests          int
}

// readPage collects shownPage from the page's rendered text.
const readPage = `(() => {
  const t = (el) => el ? el.innerText.trim() : "";
  const ups = {};
  for (const tr of document.querySelectorAll("tr[data-upstream]")) {
    const c = (cls) => t(tr.querySelector("td." + cls));
    ups[tr.dataset.upstream] = {State: c("state"), Transport: c("transport"), Era: c("protocol"),
      P50: c("p50"), Calls: c("rate"), Memory: c("memory"), LastError: c("err"),
      Faded: parseFloat(getComputedStyle(tr.querySelector("td.err")).opacity) < 1};
  }
  const tr = document.querySelector("tr[data-upstream]");
  return {Ready: t(document.getElementById("ready")), Redis: t(document.getElementById("redis")),
    RedisDetail: t(document.getElementById("redis-detail")), Refreshed: t(document.getElementById("refreshed")),
    Upstreams: ups, PageWidth: document.documentElement.scrollWidth, ViewWidth: window.innerWidth,
    Stacked: !!tr && getComputedStyle(tr).display === "block" && getComputedStyle(document.querySelector("thead")).display === "none",
    EraLines: Math.max(0, ...[...document.querySelectorAll("td.protocol")].map(lines)),
    Overflowing: [...document.querySelectorAll("header *, .card, .card *, td, #history")].filter((el) => el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).display !== "inline").map((el) => el.id || el.className || el.tagName),
    Requests: t(document.getElementById("requests")), RequestsDetail: t(document.getElementById("requests-detail")),
    HistoryBars: document.querySelectorAll("#history [data-requests]").length,
    HistoryRequests: [...document.querySelectorAll("#history [data-requests]")].reduce((n, b) => n + +b.dataset.requests, 0)};
})()`

// lines is how many lines an element's text is drawn on.
const lines = `function lines(el) {
  const r = document.createRange();
  r.selectNodeContents(el);
  return new Set([...r.getClientRects()].filter((b) => b.width > 0).map((b) => Math.round(b.top))).size;
}`

// The admin page in a real browser: a Manifold with two upstreams, one of
// them down, and Redis. The page shows each upstream's state, transport,
// era, latency and last error, the readiness and Redis, redraws by itself
// when an upstream goes down, and stays within a phone's width.
//
// MANIFOLD_UI_SCREENSHOT=docs/admin-ui.png (a path relative to the
// repository) rewrites the screenshot kept in docs/.
func TestAdminPageInBrowser(t *testing.T) {
	chromium := findChromium(t)
	rs := redistest.Start(t)
	h := newHintedServer()
	a := newSwitchable(t, modernHandler(h.Server))
	dead := fmt.Sprintf("http://127.0.0.1:%d/mcp", freePort(t))
	o := startOps(t, fmt.Sprintf("cache: {secret: ui-secret-0123456789, redis: {url: %q}}\nupstreams:", rs.URL())+
		httpUpstreamYAML("files", a.URL(), "required: true")+httpUpstreamYAML("legacy-crm", dead, "timeout: 2s"))
	o.waitReady(t, http.StatusOK, map[string]string{"files": "ready", "legacy-crm": "down"})
	for i := range 40 {
		uri := fmt.Sprintf("files+test://pub/%d", i%8)
		post(t, o.MCP, headers("resources/read", uri), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	}

	ctx := browser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 720), chromedp.Navigate(o.Admin+"/ui"),
		chromedp.WaitVisible(`tr[data-upstream="legacy-crm"]`)); err != nil {
		t.Fatalf("load /ui in chromium: %v", err)
	}
	page := shown(t, ctx)
	files, crm := page.Upstreams["files"], page.Upstreams["legacy-crm"]
	if page.Ready != "ready" || files.State != "ready" || crm.State != "down" {
		t.Errorf("readiness shown %q, files %q, legacy-crm %q; want ready, ready, down", page.Ready, files.State, crm.State)
	}
	if files.Transport != "http" || files.Era != "2026-07-28" || !strings.HasSuffix(files.P50, "ms") || files.Memory == "–" {
		t.Errorf("files row: %+v", files)
	}
	if !strings.Contains(crm.LastError, "refused") || crm.Era != "–" {
		t.Errorf("legacy-crm row should show why it is down and no era: %+v", crm)
	}
	if !strings.Contains(crm.LastError, "s ago") || crm.Faded {
		t.Errorf("legacy-crm's error should say when it happened, and stand out while it is down: %+v", crm)
	}
	if page.Redis != "in use" || !strings.Contains(page.RedisDetail, "breaker closed") {
		t.Errorf("Redis shown as %q (%q)", page.Redis, page.RedisDetail)
	}
	if page.EraLines != 1 || len(page.Overflowing) > 0 {
		t.Errorf("at 1280 px an era is drawn on %d lines (want 1), and these overflow: %v", page.EraLines, page.Overflowing)
	}
	screenshot(t, ctx, "MANIFOLD_UI_SCREENSHOT")

	a.down() // the page must notice by itself
	waitShown(t, ctx, func(p shownPage) bool {
		return p.Upstreams["files"].State == "down" && p.Ready == "not ready"
	})
	a.up()
	// Recovered: the error stays, with when it happened, faded.
	waitShown(t, ctx, func(p shownPage) bool {
		f := p.Upstreams["files"]
		return f.State == "ready" && p.Ready == "ready" && strings.Contains(f.LastError, "ago") && strings.Contains(f.LastError, "recovered") && f.Faded
	})

	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	page = shown(t, ctx)
	if !page.Stacked || page.PageWidth > page.ViewWidth {
		t.Errorf("at phone width the rows should stack and fit: stacked=%v, page %d px wide in a %d px view", page.Stacked, page.PageWidth, page.ViewWidth)
	}
	if page.EraLines != 1 || len(page.Overflowing) > 0 {
		t.Errorf("at 390 px an era is drawn on %d lines (want 1), and these overflow: %v", page.EraLines, page.Overflowing)
	}
	screenshot(t, ctx, "MANIFOLD_UI_SCREENSHOT_PHONE")
}

// waitShown re-reads the page, without reloading it, until ok holds.
func waitShown(t *testing.T, ctx context.Context, ok func(shownPage) bool) {
	t.Helper()
	eventually(t, 15*time.Second, func() error {
		last, err := chromedp.Run(ctx, chromedp.Evaluate[shownPage](lines+";"+readPage))
		if err != nil {
			return err
		}
		if !ok(last) {
			return fmt.Errorf("page shows %+v", last)
		}
		return nil
	})
}

func shown(t *testing.T, ctx context.Context) shownPage {
	t.Helper()
	p, err := chromedp.Run(ctx, chromedp.Evaluate[shownPage](lines+";"+readPage))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	return p
}

// findChromium returns the browser's path. A missing browser fails the
// test: CI installs the Debian package `chromium`.
func findChromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: install the Debian package chromium (make deps)")
	return ""
}

// browser starts a headless Chromium for the test and stops it after.
func browser(t *testing.T, path string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		cancelAlloc()
	})
	return ctx
}

// screenshot writes the page to the file an environment variable names, if
// it is set.
func screenshot(t *testing.T, ctx context.Context, env string) {
	path := os.Getenv(env)
	if path == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(path, "/") {
		path = "../" + path // tests run in test/
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Once the upstreams are idle (their latency and rate blank), the page
// still shows what was served: the totals since start, and the minutes of
// the last quarter hour that had requests, as /ui/state counts them.
func TestAdminPageKeepsTotalsWhenIdle(t *testing.T) {
	chromium := findChromium(t)
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	o := startOps(t, "upstreams:"+httpUpstreamYAML("files", up.URL))
	o.waitReady(t, http.StatusOK, map[string]string{"files": "ready"})
	for i := range 24 {
		uri := fmt.Sprintf("files+test://pub/%d", i%4)
		post(t, o.MCP, headers("resources/read", uri), rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri)))
	}
	if r := callTool(t, o.MCP, "files_nosuch", "{}"); r.Error == nil {
		t.Fatalf("an unknown tool was answered: %s", r.Body)
	}
	var st struct {
		Totals  struct{ Requests, Errors, CacheHits int }
		History []struct {
			Minute                      string
			Requests, Errors, CacheHits int
		}
	}
	code, body := o.get(t, "/ui/state")
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil {
		t.Fatalf("/ui/state: %d %v %s", code, err, body)
	}
	if st.Totals.Requests < 25 || st.Totals.Errors < 1 || st.Totals.CacheHits < 20 {
		t.Errorf("/ui/state totals %+v; want at least the 25 requests, the failed call and 20 hits", st.Totals)
	}
	sum := 0
	for _, m := range st.History {
		sum += m.Requests
	}
	if len(st.History) == 0 || len(st.History) > 15 || sum != st.Totals.Requests {
		t.Errorf("/ui/state history %+v: want at most 15 minutes holding the %d requests", st.History, st.Totals.Requests)
	}

	ctx := browser(t, chromium)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 720), chromedp.Navigate(o.Admin+"/ui"),
		chromedp.WaitVisible(`tr[data-upstream="files"]`)); err != nil {
		t.Fatalf("load /ui in chromium: %v", err)
	}
	// An idle upstream's latency goes blank a minute after its last call.
	eventually(t, 90*time.Second, func() error {
		if p := shown(t, ctx); p.Upstreams["files"].P50 != "–" {
			return fmt.Errorf("files p50 still %q", p.Upstreams["files"].P50)
		}
		return nil
	})
	page := shown(t, ctx)
	want := strconv.Itoa(st.Totals.Requests)
	if page.Requests != want || !strings.Contains(page.RequestsDetail, fmt.Sprintf("%d errors", st.Totals.Errors)) ||
		!strings.Contains(page.RequestsDetail, fmt.Sprintf("%d cache hits", st.Totals.CacheHits)) {
		t.Errorf("idle, the page shows %q requests (%q); want %s, with %d errors and %d cache hits", page.Requests, page.RequestsDetail, want, st.Totals.Errors, st.Totals.CacheHits)
	}
	if page.HistoryBars == 0 || page.HistoryRequests != st.Totals.Requests {
		t.Errorf("idle, the history shows %d minutes holding %d requests; want the %d requests", page.HistoryBars, page.HistoryRequests, st.Totals.Requests)
	}
}

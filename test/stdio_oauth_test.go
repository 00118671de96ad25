package test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/config"
)

// desktopHost is a desktop host launching manifold stdio with cfgPath (and
// env), as the go-sdk's CommandTransport does: a client that can be asked
// to open a URL, whose user (the test's browser) opens the link it is
// given and consents as user at the authorization server. It records the
// links it was asked to open.
type desktopHost struct {
	t       *testing.T
	cfgPath string
	env     []string
	user    string
	// consent is the browser: consentAs (the test authorization server)
	// when nil, consentAt for oidc-provider.
	consent func(t *testing.T, link, user string) (int, string)
	// changed, when not nil, receives notifications/tools/list_changed.
	changed chan struct{}

	mu    sync.Mutex
	links []string
}

// connect starts manifold stdio and opens a session of protocol version
// (the client's newest when "").
func (h *desktopHost) connect(ctx context.Context, version string) *mcp.ClientSession {
	h.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "desktop-host", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			h.mu.Lock()
			h.links = append(h.links, req.Params.URL)
			h.mu.Unlock()
			if req.Params.Mode != "url" {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			consent := h.consent
			if consent == nil {
				consent = consentAs
			}
			if status, page := consent(h.t, req.Params.URL, h.user); status != 200 || !strings.Contains(page, "Authorized") {
				h.t.Errorf("the consent ended %d: %s", status, page)
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case h.changed <- struct{}{}:
			default: // nil, or full: one is enough to tell
			}
		},
	})
	cmd := exec.Command(manifoldBin, "stdio", "--config", h.cfgPath)
	cmd.Env = append(os.Environ(), h.env...)
	cmd.Stderr = &lockedBuffer{}
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		_ = cs.Close()
		if h.t.Failed() {
			h.t.Logf("manifold stdio's log:\n%s", cmd.Stderr.(*lockedBuffer).String())
		}
	})
	return cs
}

func (h *desktopHost) asked() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.links...)
}

// whoamiVia calls crm_whoami on cs and returns its text, or the error.
func whoamiVia(ctx context.Context, cs *mcp.ClientSession) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "crm_whoami", Arguments: map[string]any{}})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) == 0 {
		return "", fmt.Errorf("tool error: %+v", res.Content)
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}

// lockedBuffer is a bytes buffer written by a process and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// manifold stdio serves an upstream of oauth mode user to its one caller,
// the desktop user: a call asks the host to open a link (URL elicitation),
// the link opens the consent page on a loopback listener of the stdio
// process itself, whose callback completes the consent, and the call then
// succeeds with the user's own token. The same with a configuration shared
// with serve (downstream auth and a loopback public_url, whose port the
// stdio process then listens on).
func TestStdioOAuthConsent(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			as := newAuthServer(t)
			yaml := fmt.Sprintf("upstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user}\n", as.MCP)
			if shared {
				yaml = fmt.Sprintf("public_url: http://127.0.0.1:%d\nauth: {bearer_tokens: [static-token-0123456789], authorization_servers: [https://as.example]}\n", freePort(t)) + yaml
			}
			h := &desktopHost{t: t, cfgPath: writeConfig(t, yaml), env: []string{"XDG_STATE_HOME=" + t.TempDir()}, user: "alice-at-crm"}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cs := h.connect(ctx, "")
			if _, err := cs.ListTools(ctx, nil); err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			got, err := whoamiVia(ctx, cs)
			if err != nil || got != "you are alice-at-crm" {
				t.Fatalf("the call through manifold stdio: %q, %v", got, err)
			}
			links := h.asked()
			if len(links) != 1 {
				t.Fatalf("asked %d times: %v", len(links), links)
			}
			u, err := url.Parse(links[0])
			if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Path != "/oauth/connect" {
				t.Errorf("the link %q is not the stdio process's loopback consent page", links[0])
			}
			if got, err := whoamiVia(ctx, cs); err != nil || got != "you are alice-at-crm" || len(h.asked()) != 1 {
				t.Errorf("a second call: %q, %v (asked %d times)", got, err, len(h.asked()))
			}
		})
	}
}

// A Manifold listening on loopback without downstream authentication
// serves an upstream of oauth mode user to one local principal (named by
// local_principal), with no public_url: the consent link opens the
// consent page on the listener itself, which names that principal, and
// the retry then completes with the user's token. The call carries no
// Authorization header at all.
func TestOAuthLoopbackLocalPrincipal(t *testing.T) {
	as := newAuthServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf("listen: %s\nlocal_principal: alice\nupstreams:\n  - name: crm\n    url: %s\n    oauth: {mode: user}\n", l.Addr(), as.MCP)
	cfg, problems := config.Parse([]byte(yaml), os.LookupEnv)
	if len(problems) > 0 {
		t.Fatalf("config: %v", problems)
	}
	p := startProxyOn(t, cfg, l)
	first := whoami(t, p.URL, "", "")
	if first.link == "" {
		t.Fatalf("not asked to consent: %+v", first)
	}
	if !strings.HasPrefix(first.link, "http://"+l.Addr().String()+"/oauth/connect?") {
		t.Errorf("the link %q is not the listener's consent page", first.link)
	}
	if status, page := get(t, first.link); status != 200 || !strings.Contains(page, "Connect crm for alice") {
		t.Errorf("the consent page: %d %s", status, page)
	}
	if status, page := consentAs(t, first.link, "alice-at-crm"); status != 200 {
		t.Fatalf("the callback answered %d: %s", status, page)
	}
	if got := whoami(t, p.URL, "", first.retry()); got.text != "you are alice-at-crm" {
		t.Errorf("the retry: %+v", got)
	}
}

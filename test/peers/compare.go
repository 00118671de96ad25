package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

type config struct {
	manifold, mcpProxy string
	rounds             int
	duration           time.Duration
	fanOutOnly         bool // -scale -fanout: the list fan-out alone
}

// target is one endpoint under test, with the names it serves the
// upstream's resource and tool by, and the process whose CPU is its hop.
type target struct {
	name, url, uri, tool string
	pid                  int
	behind               []int // (scale mode) upstream processes whose CPU also counts
	legacyOnly           bool  // it serves 2025-11-25 callers only
}

// scenario is one request kind from a caller of one protocol revision.
type scenario struct {
	name   string
	modern bool // a 2026-07-28 caller: no session; each request carries its _meta and headers
	build  func(t target) request
}

// modernMeta is the _meta a 2026-07-28 caller sends with every request.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"peers","version":"1"}}`

var scenarios = []scenario{
	{"resources/read", false, func(t target) request {
		return legacyRequest(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":%q}}`, t.uri))
	}},
	{"tools/call", false, func(t target) request {
		return legacyRequest(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, t.tool))
	}},
	{"resources/read, a 2026-07-28 caller", true, func(t target) request {
		return modernRequest("resources/read", t.uri, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":%q,%s}}`, t.uri, modernMeta))
	}},
	{"tools/call, a 2026-07-28 caller", true, func(t target) request {
		return modernRequest("tools/call", t.tool, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":{},%s}}`, t.tool, modernMeta))
	}},
}

// serves says whether t takes the scenario's caller.
func (t target) serves(sc scenario) bool { return !sc.modern || !t.legacyOnly }

// compare starts every target, runs the rounds and prints the report.
func compare(c config) error {
	dir, err := os.MkdirTemp("", "manifold-peers")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var procs processes
	defer procs.stopAll()
	targets, err := startTargets(c, dir, &procs)
	if err != nil {
		return err
	}
	res := results{}
	for round := range c.rounds {
		order := rotate(targets, round)
		for _, sc := range scenarios {
			for _, conc := range []int{1, 16} {
				for _, t := range order {
					if !t.serves(sc) {
						continue
					}
					m, err := measure(t, sc, conc, c.duration)
					if err != nil {
						return fmt.Errorf("%s, %s, c=%d: %w", t.name, sc.name, conc, err)
					}
					res.add(sc.name, conc, t.name, m)
				}
			}
		}
		fmt.Fprintf(os.Stderr, "round %d of %d done\n", round+1, c.rounds)
	}
	res.report(os.Stdout, targets, c)
	return nil
}

// startTargets starts the upstream and every hop in front of it.
func startTargets(c config, dir string, procs *processes) ([]target, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	up, err := procs.startPrinting(self, "-serve", "upstream")
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	upURL := "http://" + up.addr + "/mcp"
	targets := []target{{name: "direct", url: upURL, uri: "test://bench/doc", tool: "echo", pid: up.pid}}
	rp, err := procs.startPrinting(self, "-serve", "reverseproxy", "-to", upURL)
	if err != nil {
		return nil, fmt.Errorf("reverse proxy: %w", err)
	}
	targets = append(targets, target{name: "httputil.ReverseProxy", url: "http://" + rp.addr + "/mcp", uri: "test://bench/doc", tool: "echo", pid: rp.pid})
	if c.mcpProxy != "" {
		t, err := startMCPProxy(c.mcpProxy, dir, upURL, procs)
		if err != nil {
			return nil, fmt.Errorf("mcp-proxy: %w", err)
		}
		targets = append(targets, t)
	}
	t, err := startManifold(c.manifold, dir, upURL, procs)
	if err != nil {
		return nil, fmt.Errorf("manifold: %w", err)
	}
	return append(targets, t), nil
}

// startManifold runs Manifold with both cache tiers off (a ttlMs 0
// upstream stores nothing, but concurrent identical misses would still be
// collapsed into one call, which is not a hop's work).
func startManifold(bin, dir, upURL string, procs *processes) (target, error) {
	addr, err := freeAddr()
	if err != nil {
		return target{}, err
	}
	cfg := filepath.Join(dir, "manifold.yaml")
	yaml := fmt.Sprintf("listen: %s\ncache: {memory: {max_bytes: 0}}\nupstreams:\n  - {name: bench, url: %q}\n", addr, upURL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return target{}, err
	}
	pid, err := procs.startListening(addr, bin, "serve", "--config", cfg)
	if err != nil {
		return target{}, err
	}
	return target{name: "Manifold", url: "http://" + addr + "/mcp", uri: "bench+test://bench/doc", tool: "bench_echo", pid: pid}, nil
}

// startMCPProxy runs TBXark/mcp-proxy with the upstream as its one server,
// served over Streamable HTTP at /bench/.
func startMCPProxy(bin, dir, upURL string, procs *processes) (target, error) {
	addr, err := freeAddr()
	if err != nil {
		return target{}, err
	}
	cfg := filepath.Join(dir, "mcp-proxy.json")
	json := fmt.Sprintf(`{"mcpProxy":{"baseURL":"http://%s","addr":%q,"name":"peer","version":"1","type":"streamable-http"},
"mcpServers":{"bench":{"transportType":"streamable-http","url":%q}}}`, addr, addr, upURL)
	if err := os.WriteFile(cfg, []byte(json), 0o600); err != nil {
		return target{}, err
	}
	pid, err := procs.startListening(addr, bin, "-config", cfg)
	if err != nil {
		return target{}, err
	}
	// It speaks 2025-11-25 to its callers (mcp-go's server side).
	return target{name: "TBXark/mcp-proxy", url: "http://" + addr + "/bench/", uri: "test://bench/doc", tool: "echo", pid: pid, legacyOnly: true}, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// rotate returns ts starting at the round's offset.
func rotate[T any](ts []T, round int) []T {
	k := round % len(ts)
	return append(slices.Clone(ts[k:]), ts[:k]...)
}

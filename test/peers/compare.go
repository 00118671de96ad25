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
}

// target is one endpoint under test, with the names it serves the
// upstream's resource and tool by, and the process whose CPU is its hop.
type target struct {
	name, url, uri, tool string
	pid                  int
	behind               []int // (scale mode) upstream processes whose CPU also counts
}

// scenario is one request kind.
type scenario struct {
	name string
	body func(t target) string
}

var scenarios = []scenario{
	{"resources/read", func(t target) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":%q}}`, t.uri)
	}},
	{"tools/call", func(t target) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, t.tool)
	}},
}

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
	return target{name: "TBXark/mcp-proxy", url: "http://" + addr + "/bench/", uri: "test://bench/doc", tool: "echo", pid: pid}, nil
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

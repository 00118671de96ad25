// Command peers measures Manifold's pass-through hop side by side with its
// references, interleaved, in one run: the upstream called directly, a bare
// httputil.ReverseProxy, the peer gateway TBXark/mcp-proxy, and Manifold.
//
// Every target fronts the same go-sdk upstream (a 1 KiB resource and a tool
// answering 1 KiB), in its own process, and is driven the way most hosts
// speak today: a 2025-11-25 session per client, then resources/read or
// tools/call. Each round runs every target once per scenario, in an order
// that rotates between rounds, so drift in the machine spreads over all of
// them; the report gives each ratio against direct as the median and range
// over the rounds.
//
//	go run ./test/peers -manifold bin/manifold -mcp-proxy PATH [-rounds 5] [-duration 3s]
//
// scripts/peers builds both binaries (mcp-proxy at a pinned version from the
// module proxy) and runs it. The same binary also serves as the upstream and
// the reverse proxy (-serve upstream|reverseproxy), so that each runs alone in
// its own process, as the gateways do.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"time"
)

func main() {
	serve := flag.String("serve", "", "run a component instead: upstream or reverseproxy")
	addr := flag.String("addr", "127.0.0.1:0", "with -serve: the address to listen on")
	to := flag.String("to", "", "with -serve reverseproxy: the upstream URL")
	manifold := flag.String("manifold", "bin/manifold", "the manifold binary")
	mcpProxy := flag.String("mcp-proxy", "", "the TBXark/mcp-proxy binary (empty: leave it out)")
	rounds := flag.Int("rounds", 5, "interleaved rounds")
	duration := flag.Duration("duration", 3*time.Second, "how long each target runs per scenario and round")
	flag.Parse()
	var err error
	switch *serve {
	case "upstream":
		err = serveUpstream(*addr)
	case "reverseproxy":
		err = serveReverseProxy(*addr, *to)
	case "":
		err = compare(config{manifold: *manifold, mcpProxy: *mcpProxy, rounds: *rounds, duration: *duration})
	default:
		err = fmt.Errorf("unknown -serve %q", *serve)
	}
	if err != nil {
		log.SetFlags(0)
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

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
// With -scale it runs the scale curves instead (see scale.go), each against
// the floor a bare process sets, with RSS read from /proc/PID/status:
//
//   - p50, p99, throughput and peak RSS at concurrency 1, 16, 64 and 256, for
//     Manifold's memory-cache hits against a bare net/http handler answering
//     the same bytes, and for Manifold's pass-through reads (cache off)
//     against the upstream called directly;
//   - RSS per idle subscriptions/listen stream, 1,000 of them to a fresh
//     Manifold against as many to a bare SSE server;
//   - resources/list fanned out over 16 upstream processes that answer after
//     2 ms + i×0.5 ms, against the slowest of them alone.
//
// That mode needs no mcp-proxy:
//
//	go run ./test/peers -scale -manifold bin/manifold [-rounds 5] [-duration 3s]
//
// and with -fanout it runs only the last of them, the list fan-out.
//
// scripts/peers builds both binaries (mcp-proxy at a pinned version from the
// module proxy) and runs it (scripts/peers -scale for the curves). The same
// binary also serves as the upstream, the reverse proxy and the bare
// references (-serve upstream|reverseproxy|bare|sse), so that each runs alone
// in its own process, as the gateways do.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"time"
)

func main() {
	serve := flag.String("serve", "", "run a component instead: upstream, reverseproxy, bare or sse")
	addr := flag.String("addr", "127.0.0.1:0", "with -serve: the address to listen on")
	to := flag.String("to", "", "with -serve reverseproxy: the upstream URL")
	delay := flag.Duration("delay", 0, "with -serve upstream: how long resources/list takes")
	body := flag.String("body", "", "with -serve bare: the file holding the answer to every POST")
	scale := flag.Bool("scale", false, "run only the scale curves")
	fanOnly := flag.Bool("fanout", false, "with -scale: run only the 16-upstream list fan-out")
	manifold := flag.String("manifold", "bin/manifold", "the manifold binary")
	mcpProxy := flag.String("mcp-proxy", "", "the TBXark/mcp-proxy binary (empty: leave it out)")
	rounds := flag.Int("rounds", 5, "interleaved rounds")
	duration := flag.Duration("duration", 3*time.Second, "how long each target runs per scenario and round")
	flag.Parse()
	var err error
	switch *serve {
	case "upstream":
		err = serveUpstream(*addr, *delay)
	case "reverseproxy":
		err = serveReverseProxy(*addr, *to)
	case "bare":
		err = serveBare(*addr, *body)
	case "sse":
		err = serveSSE(*addr)
	case "":
		if *scale {
			err = runScale(config{manifold: *manifold, rounds: *rounds, duration: *duration, fanOutOnly: *fanOnly})
			break
		}
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

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// upstreamKinds are the upstreams of every soak, one per transport, each
// named after its kind; the stdio one is each replica's own child.
var upstreamKinds = []string{"modern", "legacy", "sse", "stdio"}

// privateKinds are the upstreams whose private resource names its caller:
// those reached over HTTP requests that carry the caller's Authorization
// (a 2024-11-05 server answers on its shared stream, a child has none).
var privateKinds = []string{"modern", "legacy"}

// cluster is what a soak runs: Redis, the HTTP upstreams and the replicas.
type cluster struct {
	dir       string
	self      string // this binary: the upstreams and the stdio children
	redis     *proc
	upstreams map[string]*proc
	replicas  []*replica
	tokens    []string // one per principal
	procs     procs
	reloads   int // how many times the configuration was changed
}

// replica is one `manifold serve`.
type replica struct {
	index       int
	proc        *proc
	mcp, admin  string // http://ADDR/mcp, http://ADDR
	config      string
	listen, adm string
}

func startCluster(o options) (*cluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: o.dir, self: self, upstreams: map[string]*proc{}}
	for i := range o.principals {
		c.tokens = append(c.tokens, fmt.Sprintf("soak-principal-%02d-token-7f3a9c", i))
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	c.redis = c.procs.add(&proc{name: "redis", bin: "redis-server", addr: addr, log: c.path("redis.log"),
		args: []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", o.dir}})
	if err := c.redis.start(); err != nil {
		return c, fmt.Errorf("redis-server (is it installed?): %w", err)
	}
	for _, kind := range upstreamKinds[:3] {
		if addr, err = freePort(); err != nil {
			return c, err
		}
		p := c.procs.add(&proc{name: kind, bin: self, addr: addr, log: c.path(kind + ".log"),
			args: []string{"-serve", kind, "-name", kind, "-addr", addr}})
		if err := p.start(); err != nil {
			return c, err
		}
		c.upstreams[kind] = p
	}
	for i := range o.replicas {
		r, err := c.startReplica(o, i)
		if err != nil {
			return c, err
		}
		c.replicas = append(c.replicas, r)
	}
	return c, c.waitReady(60 * time.Second)
}

func (c *cluster) path(name string) string { return filepath.Join(c.dir, name) }

func (c *cluster) startReplica(o options, i int) (*replica, error) {
	listen, err := freePort()
	if err != nil {
		return nil, err
	}
	adm, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &replica{index: i, mcp: "http://" + listen + "/mcp", admin: "http://" + adm, config: c.path(fmt.Sprintf("replica-%d.yaml", i)), listen: listen, adm: adm}
	if err := os.WriteFile(r.config, []byte(c.configOf(r)), 0o600); err != nil {
		return nil, err
	}
	r.proc = c.procs.add(&proc{name: fmt.Sprintf("replica-%d", i), bin: o.manifold, addr: listen, log: c.path(fmt.Sprintf("replica-%d.log", i)),
		args: []string{"serve", "--config", r.config}})
	return r, r.proc.start()
}

// configOf is a replica's configuration: every replica shares Redis (the
// cache, the sessions, the rate buckets), the secrets and the tokens. A
// reload changes the legacy upstream's timeout, so that it is replaced.
func (c *cluster) configOf(r *replica) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nadmin: {listen: %s}\ncursor_secret: soak-cursor-secret-0123456789\n", r.listen, r.adm)
	fmt.Fprintf(&b, "log: {level: info}\nauth:\n  authorization_servers: [\"https://idp.example.com\"]\n  bearer_tokens:\n")
	for _, t := range c.tokens {
		fmt.Fprintf(&b, "    - %s\n", t)
	}
	fmt.Fprintf(&b, "cache: {secret: soak-cache-secret-0123456789, redis: {url: \"redis://%s/0\"}}\n", c.redis.addr)
	b.WriteString("sessions: {idle_timeout: 20s}\nsubscriptions: {keepalive: 5s}\nhealth: {probe_interval: 1s}\nupstreams:\n")
	fmt.Fprintf(&b, "  - {name: modern, url: \"http://%s/mcp\", required: true, forward_headers: [Authorization], timeout: 10s}\n", c.upstreams["modern"].addr)
	fmt.Fprintf(&b, "  - {name: legacy, url: \"http://%s/mcp\", forward_headers: [Authorization], default_ttl: 3s, default_scope: private, timeout: %ds}\n",
		c.upstreams["legacy"].addr, 10+c.reloads%2)
	fmt.Fprintf(&b, "  - {name: sse, url: \"http://%s/sse\", transport: sse, default_ttl: 3s, default_scope: public, timeout: 10s}\n", c.upstreams["sse"].addr)
	fmt.Fprintf(&b, "  - {name: stdio, command: [%q, -serve, stdio, -name, stdio], default_ttl: 3s, default_scope: public, timeout: 10s}\n", c.self)
	return b.String()
}

// waitReady waits until every replica says it is ready with every upstream
// ready.
func (c *cluster) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, r := range c.replicas {
		for {
			why := r.notReady()
			if why == "" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("replica %d not ready after %v: %s", r.index, within, why)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// notReady says why the replica is not ready with all its upstreams, or "".
func (r *replica) notReady() string {
	resp, err := http.Get(r.admin + "/readyz")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var body struct {
		Upstreams map[string]struct{ State string } `json:"upstreams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err.Error()
	}
	for _, kind := range upstreamKinds {
		if st := body.Upstreams[kind].State; st != "ready" {
			return kind + " " + st
		}
	}
	if resp.StatusCode != http.StatusOK {
		return resp.Status
	}
	return ""
}

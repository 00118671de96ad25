package upstream

import "time"

// ToolCache is the operator's policy for caching the results of a
// server's tools. The router applies it (router/toolcache.go): only to
// tools the server's tools/list annotates readOnlyHint: true, whatever
// Tools says.
type ToolCache struct {
	// TTL is how long a result stays fresh; 0 caches nothing.
	TTL time.Duration
	// Scope is the cacheScope results are stored under: private (per
	// caller, keyed as the server's private reads are) or public.
	Scope string
	// Tools selects, by the server's own names, the tools that may be
	// cached (Allow only; none: all of them).
	Tools Filter
	// StaleIfError lets an expired result stand in while the server
	// cannot be reached, as for reads.
	StaleIfError bool
}

// Caches reports whether the policy lets results of the server's tool
// name be cached.
func (t ToolCache) Caches(name string) bool { return t.TTL > 0 && t.Tools.Admits(name) }

// ToolCache returns the server's tool cache policy.
func (u *Upstream) ToolCache() ToolCache { return u.o.ToolCache }

package oauth

import (
	"time"

	"github.com/manifold-mcp/manifold/internal/clip"
)

// Stats are what an operator is shown of a client: counts and the last
// refresh failure, never a token, a state or a link. They are this
// replica's: the grants it holds in front of the store, and the consents
// it asked for.
type Stats struct {
	Grants  int // principals holding a grant
	Pending int // consents asked and not completed, while their links hold
	// RefreshFailure is the last refresh the authorization server refused
	// or that failed, as the log says it; zero RefreshFailedAt for none.
	RefreshFailure  string
	RefreshFailedAt time.Time
}

// Stats returns c's figures now.
func (c *Client) Stats() Stats {
	c.held.mu.Lock()
	grants := len(c.held.grants)
	c.held.mu.Unlock()
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Grants: grants, RefreshFailure: c.refreshFailure, RefreshFailedAt: c.refreshFailedAt}
	for _, a := range c.asked {
		if now.Before(a.until) {
			s.Pending++
		}
	}
	return s
}

// refreshFailed records a refresh that failed, what for (no token: a
// refusal's code and description, scrubbed, or the failure).
func (c *Client) refreshFailed(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshFailure, c.refreshFailedAt = clip.Text(what, 200), time.Now()
}

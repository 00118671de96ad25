// Package loopback says whether a host names this machine: where plain
// http is safe to use (the bytes never leave it), and what Manifold's own
// Origin and Host checks admit without being told.
package loopback

import (
	"net"
	"strings"
)

// Host reports whether host (a name or an IP, without a port or brackets)
// is localhost or a loopback address.
func Host(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

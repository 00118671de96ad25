// Package loopback says whether a host names this machine: where plain
// http is safe to use (the bytes never leave it), and what Manifold's own
// Origin and Host checks admit without being told.
package loopback

import (
	"net"
	"net/url"
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

// Secure reports whether what travels to u is out of the network's
// reach: https, or plain http to a loopback host, whose bytes never leave
// this machine.
func Secure(u *url.URL) bool {
	return u.Scheme == "https" || u.Scheme == "http" && Host(u.Hostname())
}

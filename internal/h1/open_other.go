//go:build !unix

package h1

import "net"

// open cannot peek on this system: a closed connection shows when used.
func open(net.Conn) bool { return true }

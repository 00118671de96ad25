// Package panics contains a panic in a goroutine Manifold starts for a
// request: a fill, a refresh, a held call, a page of a merged list, a
// server's question. An HTTP handler's recovery does not reach those
// goroutines, and a panic there would end the process with every other
// caller's request in it. Recovered where it happens, it becomes the error
// of the one request it served, and whoever answers that request logs it
// once, with the stack of where it happened.
package panics

import (
	"fmt"
	"runtime/debug"
)

// Error is a recovered panic and the stack it was raised on.
type Error struct {
	Value any
	Stack []byte
}

func (e *Error) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Recover, deferred, turns a panic of the function that defers it into
// *err.
func Recover(err *error) {
	if p := recover(); p != nil {
		*err = &Error{Value: p, Stack: debug.Stack()}
	}
}

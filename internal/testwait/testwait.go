// Package testwait is how tests wait for what they can observe: a
// condition polled until it holds or a deadline passes, never a fixed
// sleep standing in for it. For tests only.
package testwait

import (
	"testing"
	"time"
)

// Eventually calls f every 50 ms until it returns nil, and fails the test
// with f's last error if that has not happened within d.
func Eventually(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

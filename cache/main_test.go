package cache

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: a cache that is closed has
// stopped its invalidation listener and its asynchronous writes.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

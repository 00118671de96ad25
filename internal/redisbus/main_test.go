package redisbus_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: when Listen returns, its
// sentinel watchers have stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

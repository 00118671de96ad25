package breaker

import (
	"testing"
	"time"
)

func TestBreakerCycle(t *testing.T) {
	now := time.Unix(0, 0)
	var changes []bool
	b := New(3, time.Second, func(open bool) { changes = append(changes, open) })
	b.now = func() time.Time { return now }
	for i := 0; i < 2; i++ {
		b.Failure()
	}
	if !b.Allow() || b.Open() {
		t.Fatal("opened before the threshold")
	}
	b.Success() // a success resets the run
	b.Failure()
	b.Failure()
	if b.Open() {
		t.Fatal("a non-consecutive run opened it")
	}
	b.Failure()
	if !b.Open() || b.Allow() {
		t.Fatal("not open after 3 consecutive failures")
	}
	now = now.Add(1500 * time.Millisecond)
	if !b.Allow() {
		t.Fatal("no probe after the cooldown")
	}
	if b.Allow() {
		t.Fatal("a second probe while the first is out")
	}
	b.Failure() // the probe failed: open for another cooldown
	if b.Allow() {
		t.Fatal("allowed right after a failed probe")
	}
	now = now.Add(1500 * time.Millisecond)
	if !b.Allow() {
		t.Fatal("no probe after the second cooldown")
	}
	b.Success()
	if b.Open() || !b.Allow() {
		t.Fatal("not closed after a good probe")
	}
	if len(changes) != 2 || !changes[0] || changes[1] {
		t.Errorf("transitions reported: %v, want [true false]", changes)
	}
}

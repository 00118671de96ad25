package process

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The history holds the last 15 minutes, a minute without requests
// counting none, and its minutes add up to the totals while no more than
// 15 minutes have passed.
func TestTrafficHistory(t *testing.T) {
	clock := time.Date(2026, 12, 6, 10, 0, 30, 0, time.UTC)
	var hits uint64
	tr := newTraffic(func() uint64 { return hits })
	tr.now = func() time.Time { return clock }
	tr.marks[0].at = clock.Truncate(time.Minute)
	for minute := range 20 {
		if minute != 3 { // a quiet minute
			tr.count(context.Background(), "resources/read", 0, nil)
			tr.count(context.Background(), "tools/call", 0, errors.New("refused"))
			hits++
		}
		if minute == 2 {
			totals, history := tr.snapshot()
			if len(history) != 3 || totals.Requests != 6 || totals.Errors != 3 || totals.CacheHits != 3 {
				t.Fatalf("after 3 minutes: %+v, %+v", totals, history)
			}
			for _, m := range history {
				if m.Requests != 2 || m.Errors != 1 || m.CacheHits != 1 {
					t.Errorf("minute %s: %+v; want 2 requests, 1 error, 1 hit", m.Minute, m.uiTraffic)
				}
			}
		}
		clock = clock.Add(time.Minute)
		tr.mark() // as run does at each minute's start
	}
	totals, history := tr.snapshot()
	if totals.Requests != 38 || len(history) != historyMinutes {
		t.Fatalf("after 20 minutes: totals %+v, %d minutes; want 38 requests and %d minutes", totals, len(history), historyMinutes)
	}
	if first, last := history[0].Minute, history[len(history)-1].Minute; first != "2026-12-06T10:06:00Z" || last != "2026-12-06T10:20:00Z" {
		t.Errorf("history from %s to %s; want 10:06 to 10:20", first, last)
	}
	if now := history[len(history)-1]; now.Requests != 0 {
		t.Errorf("the current minute, without requests yet: %+v", now)
	}
}

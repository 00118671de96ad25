package upstream

import (
	"bytes"
	"context"
	"fmt"
	"github.com/manifold-mcp/manifold/upstream/transport"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// An outage of 30 s at 300 failed calls a second, then recovery: four log
// lines (failing, two summaries, recovered), not 9,000; the state follows.
func TestHealthSummarizesOutage(t *testing.T) {
	var buf bytes.Buffer
	h := newHealth(slog.New(slog.NewTextHandler(&buf, nil)), nil)
	clock := time.Unix(1_000_000, 0)
	h.now = func() time.Time { return clock }

	h.observe(5*time.Millisecond, nil)
	if st := h.status(); st.State != Ready || st.P50 != 5*time.Millisecond {
		t.Fatalf("after a success: %+v", st)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for i := 0; i < 9000; i++ {
		clock = clock.Add(time.Second / 300)
		h.observe(time.Millisecond, refused)
	}
	if st := h.status(); st.State != Down || !strings.Contains(st.LastError, "connection refused") {
		t.Fatalf("during the outage: %+v", st)
	}
	clock = clock.Add(2 * time.Second)
	h.observe(4*time.Millisecond, nil)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var kinds []string
	for _, l := range lines {
		switch {
		case strings.Contains(l, `msg="upstream failing"`):
			kinds = append(kinds, "failing")
		case strings.Contains(l, `msg="upstream still failing"`):
			kinds = append(kinds, "still")
		case strings.Contains(l, `msg="upstream recovered"`):
			kinds = append(kinds, "recovered")
		}
	}
	if strings.Join(kinds, ",") != "failing,still,still,recovered" || len(lines) != 4 {
		t.Errorf("log of a 30 s outage: %q\n%s", kinds, buf.String())
	}
	if !strings.Contains(lines[3], "failures=9000") {
		t.Errorf("recovery line lacks the count: %s", lines[3])
	}
	if st := h.status(); st.State != Ready {
		t.Errorf("after recovery: %v", st.State)
	}
}

// A flapping upstream, failing and answering in turn, is one episode: a
// line when it starts, one when it ends.
func TestHealthFlappingIsOneEpisode(t *testing.T) {
	var buf bytes.Buffer
	h := newHealth(slog.New(slog.NewTextHandler(&buf, nil)), nil)
	clock := time.Unix(1_000_000, 0)
	h.now = func() time.Time { return clock }
	for i := 0; i < 1000; i++ {
		clock = clock.Add(time.Millisecond)
		h.observe(time.Millisecond, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
		h.observe(time.Millisecond, nil)
	}
	clock = clock.Add(2 * time.Second)
	h.observe(time.Millisecond, nil)
	if n := strings.Count(buf.String(), "\n"); n != 2 || !strings.Contains(buf.String(), "failures=1000") {
		t.Errorf("1,000 flips logged %d lines:\n%s", n, buf.String())
	}
}

// An upstream that comes back and then sees no more traffic is still
// reported recovered, once the recovery has held for recoveredAfter.
func TestHealthRecoveryLoggedWithoutTraffic(t *testing.T) {
	var buf syncBuffer
	h := newHealth(slog.New(slog.NewTextHandler(&buf, nil)), nil)
	h.observe(time.Millisecond, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	h.observe(time.Millisecond, nil)
	if strings.Contains(buf.String(), "recovered") {
		t.Fatal("recovered at once, before the recovery held")
	}
	deadline := time.Now().Add(3 * recoveredAfter)
	for !strings.Contains(buf.String(), `msg="upstream recovered"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery line within %v:\n%s", 3*recoveredAfter, buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A call that gave up waiting for a channel still being opened is not the
// failing episode's first line: the opening's own failure, a moment later,
// says why (here an SSE stream that never sent its endpoint).
func TestHealthChannelWaitIsNotTheCause(t *testing.T) {
	var buf bytes.Buffer
	h := newHealth(slog.New(slog.NewTextHandler(&buf, nil)), nil)
	h.observe(time.Second, fmt.Errorf("%w: %w", transport.ErrChannelWait, context.DeadlineExceeded))
	h.Failure(fmt.Errorf("SSE stream did not open: %w", transport.ErrNoEndpoint))
	first, _, _ := strings.Cut(buf.String(), "\n")
	if !strings.Contains(first, `msg="upstream failing"`) || !strings.Contains(first, "no endpoint event") {
		t.Errorf("the episode's first line: %s\nall:\n%s", first, buf.String())
	}
}

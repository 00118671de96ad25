package transport

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// Answers find their calls by id, whatever the order they come in; an
// answer to no call in flight finds none.
func TestPendingAnswersByID(t *testing.T) {
	var tab pending
	var wg sync.WaitGroup
	sent := make(chan string, 3)
	got := map[string]string{}
	var mu sync.Mutex
	for _, id := range []string{"1", "2", "3"} {
		wg.Go(func() {
			m, ok, err := tab.call(context.Background(), json.RawMessage(id), func() error { sent <- id; return nil }, func(error) {})
			if err != nil || !ok {
				t.Errorf("call %s: ok %v, %v", id, ok, err)
				return
			}
			mu.Lock()
			got[id] = string(m.Result)
			mu.Unlock()
		})
	}
	for range 3 {
		<-sent
	}
	for _, id := range []string{"3", "1", "2"} {
		if !tab.answer(&jsonrpc.Message{ID: json.RawMessage(id), Result: json.RawMessage(`"r` + id + `"`)}) {
			t.Errorf("the answer to %s found no call", id)
		}
	}
	wg.Wait()
	for _, id := range []string{"1", "2", "3"} {
		if got[id] != `"r`+id+`"` {
			t.Errorf("call %s got %s", id, got[id])
		}
	}
	if tab.answer(&jsonrpc.Message{ID: json.RawMessage("1"), Result: json.RawMessage(`{}`)}) {
		t.Error("a second answer to 1 found a call")
	}
}

// When the channel ends, every waiting call learns it, and a call made
// after does not wait: nothing would ever answer it.
func TestPendingFailEndsEveryCall(t *testing.T) {
	var tab pending
	waiting := make(chan struct{}, 2)
	ended := make(chan bool, 2)
	for _, id := range []string{"1", "2"} {
		go func() {
			_, ok, _ := tab.call(context.Background(), json.RawMessage(id), func() error { waiting <- struct{}{}; return nil }, func(error) {})
			ended <- ok
		}()
	}
	<-waiting
	<-waiting
	tab.fail()
	for range 2 {
		select {
		case ok := <-ended:
			if ok {
				t.Error("a call on an ended channel reported an answer")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a call still waits on an ended channel")
		}
	}
	sent := false
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // bounds a call that would wait
	defer cancel()
	if _, ok, _ := tab.call(ctx, json.RawMessage("3"), func() error { sent = true; return nil }, func(error) {}); ok || sent {
		t.Errorf("a call after the end: ok %v, sent %v; want neither", ok, sent)
	}
}

// A call whose caller gives up is forgotten, and the server told why; one
// that could not be sent is forgotten with the send's error.
func TestPendingCancelAndSendFailure(t *testing.T) {
	var tab pending
	ctx, cancel := context.WithCancel(context.Background())
	told := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		_, _, err := tab.call(ctx, json.RawMessage("1"), func() error { cancel(); return nil }, func(cause error) { told <- cause })
		done <- err
	}()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled call: %v", err)
	}
	if cause := <-told; !errors.Is(cause, context.Canceled) {
		t.Errorf("the server was told %v", cause)
	}
	if tab.answer(&jsonrpc.Message{ID: json.RawMessage("1"), Result: json.RawMessage(`{}`)}) {
		t.Error("a late answer found the cancelled call")
	}
	refused := errors.New("write refused")
	if _, ok, err := tab.call(context.Background(), json.RawMessage("2"), func() error { return refused }, func(error) {}); !ok || !errors.Is(err, refused) {
		t.Errorf("a call not sent: ok %v, %v", ok, err)
	}
	if tab.answer(&jsonrpc.Message{ID: json.RawMessage("2"), Result: json.RawMessage(`{}`)}) {
		t.Error("an answer found the call that was never sent")
	}
}

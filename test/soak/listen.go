package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// tickURI is the resource every listen of a soak watches: the modern
// upstream announces it updated every second.
const tickURI = "modern+test://modern/tick"

// quietLimit is how long a listen may go without the update it watches
// while nothing is failing.
const quietLimit = 20 * time.Second

// listener keeps a listen stream open on r until ctx ends, opening it
// again when it ends; each opening is a request.
func (l *load) listener(ctx context.Context, r *replica, token string) {
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, r, token)
		if ctx.Err() != nil {
			return
		}
		l.t.record("listen", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

type streamMessage struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Params struct {
		URI  string `json:"uri"`
		Meta struct {
			SubscriptionID json.RawMessage `json:"io.modelcontextprotocol/subscriptionId"`
		} `json:"_meta"`
	} `json:"params"`
}

// listenOnce runs one stream: its acknowledgment first, then updates of
// tickURI, every message tagged with the stream's own id; a stream the
// server ends gracefully is no failure.
func (l *load) listenOnce(ctx context.Context, r *replica, token string) error {
	l.t.requests.Add(1)
	id := nextID.Add(1)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":[%q]},%s}}`, id, tickURI, modernMeta)
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, r.mcp, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"},
		"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"subscriptions/listen"}, "Authorization": {"Bearer " + token}}
	resp, err := (&http.Client{Transport: httpClient.Transport}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var b [512]byte
		n, _ := resp.Body.Read(b[:])
		_, err := envelope(b[:n], id)
		return err
	}
	messages := make(chan streamMessage)
	readErr := make(chan error, 1)
	go func() { readErr <- readStream(bufio.NewScanner(resp.Body), messages) }()
	return l.follow(id, messages, readErr)
}

func readStream(sc *bufio.Scanner, out chan<- streamMessage) error {
	defer close(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m streamMessage
		if err := json.Unmarshal([]byte(d), &m); err != nil {
			return wrongf("listen stream message: %v: %.200q", err, d)
		}
		out <- m
	}
	return sc.Err()
}

// follow checks a stream's messages until it ends.
func (l *load) follow(id int64, messages <-chan streamMessage, readErr <-chan error) error {
	want := fmt.Sprint(id)
	acked := false
	quiet := time.NewTimer(quietLimit)
	defer quiet.Stop()
	for {
		select {
		case m, ok := <-messages:
			if !ok {
				if err := <-readErr; err != nil && !errors.Is(err, context.Canceled) {
					return err
				}
				return errors.New("listen stream ended")
			}
			if len(m.ID) > 0 {
				if string(m.ID) != want || len(m.Result) == 0 {
					return wrongf("listen %d answered as %s", id, m.ID)
				}
				return nil // closed gracefully (a replica shutting down)
			}
			if got := string(m.Params.Meta.SubscriptionID); got != want {
				return wrongf("listen %d got %s tagged %s", id, m.Method, got)
			}
			switch {
			case !acked && m.Method != "notifications/subscriptions/acknowledged":
				return wrongf("listen %d: %s before the acknowledgment", id, m.Method)
			case !acked:
				acked = true
			case m.Method == "notifications/resources/updated" && m.Params.URI != tickURI:
				return wrongf("listen %d told of %s, which it did not subscribe to", id, m.Params.URI)
			}
			quiet.Reset(quietLimit)
		case <-quiet.C:
			if !l.faulting.Load() {
				return fmt.Errorf("listen %d: no update of %s in %v", id, tickURI, quietLimit)
			}
			quiet.Reset(quietLimit)
		}
	}
}

package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router/hub"
)

// listen serves a modern subscriptions/listen: the acknowledgment, tagged
// with the request's id and carrying what Manifold honours, then each event
// of the hub's subscription tagged the same way, until the caller leaves, the
// subscriber falls behind, or Manifold shuts down (which answers the request
// with its graceful-closure result). Up to the acknowledgment (or the
// refusal) it is a request like any other, inside the links; the stream
// after it is counted by the hub (manifold_subscriptions_open).
func (d *Dispatcher) listen(ctx context.Context, id json.RawMessage, req *mcp.Request, w Writer) {
	var sub *hub.Subscription
	_, err := d.local(ctx, req, func(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
		s, err := d.subscribe(ctx, id, req, w)
		sub = s
		return nil, err
	})
	if err != nil {
		w.Error(id, d.answerable(req.Method, err))
		return
	}
	if sub == nil {
		return // the caller left before its acknowledgment
	}
	defer sub.Close()
	d.stream(ctx, id, sub, w)
}

// subscribe opens the hub's subscription for a listen and acknowledges it;
// a nil subscription and no error when the caller is gone.
func (d *Dispatcher) subscribe(ctx context.Context, id json.RawMessage, req *mcp.Request, w Writer) (*hub.Subscription, error) {
	var filter mcp.SubscriptionFilter
	raw, ok := req.Params["notifications"]
	if !ok || len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &filter) != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "params.notifications must be a subscription filter object")
	}
	sub, err := d.o.Hub.Subscribe(ctx, filter)
	if err != nil {
		return nil, err
	}
	if w.Notify(acknowledged(id, sub.Honoured)) != nil {
		sub.Close()
		return nil, nil
	}
	return sub, nil
}

// stream writes sub's events until it ends or the caller leaves.
func (d *Dispatcher) stream(ctx context.Context, id json.RawMessage, sub *hub.Subscription, w Writer) {
	var tick <-chan time.Time
	ka, canKeepAlive := w.(KeepAliver)
	if canKeepAlive {
		t := time.NewTicker(d.o.KeepAlive)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev := <-sub.Events():
			if w.Notify(eventMessage(id, ev)) != nil {
				return
			}
		case <-tick:
			if ka.KeepAlive() != nil {
				return
			}
		case <-sub.Ended():
			switch err := sub.Err(); {
			case errors.Is(err, hub.ErrClosing), errors.Is(err, hub.ErrExpired):
				// Ended cleanly: the caller listens again (with a fresh
				// credential, if it was the one that expired).
				w.Result(id, closure(id))
			default:
				d.o.Logger.Warn("subscriber too slow; closing its stream", "subscriptionId", string(id))
			}
			return
		case <-ctx.Done():
			return
		}
	}
}

// The messages of a listen stream, built by hand: the fan-out encodes one
// per subscriber.

func tagged(method string, id json.RawMessage, extra string) []byte {
	b := make([]byte, 0, 128+len(extra))
	b = append(b, `{"jsonrpc":"2.0","method":`...)
	b = strconv.AppendQuote(b, method)
	b = append(b, `,"params":{"_meta":{"io.modelcontextprotocol/subscriptionId":`...)
	b = append(b, id...)
	b = append(b, '}')
	b = append(b, extra...)
	return append(b, "}}"...)
}

func eventMessage(id json.RawMessage, ev hub.Event) []byte {
	if ev.List != nil {
		return tagged(ev.List.Notification, id, "")
	}
	return tagged(mcp.NotifyResourceUpdated, id, `,"uri":`+string(jsonrpc.Quote(ev.URI)))
}

func acknowledged(id json.RawMessage, honoured mcp.SubscriptionFilter) []byte {
	f, _ := json.Marshal(honoured)
	return tagged(mcp.NotifyAcknowledged, id, `,"notifications":`+string(f))
}

// closure is the listen request's result: the server ended it gracefully.
func closure(id json.RawMessage) json.RawMessage {
	return json.RawMessage(`{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":` + string(id) + `}}`)
}

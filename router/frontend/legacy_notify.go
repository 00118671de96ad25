package frontend

import (
	"context"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router/hub"
	"github.com/manifold-mcp/manifold/router/session"
)

// Notifications delivers session id's subscriptions with send, as legacy
// (untagged) notifications, until ctx ends or the session does. It follows
// the session's subscription set as it changes, wherever it is changed, and
// calls keepAlive on quiet streams (which also keeps the session alive).
func (l *Legacy) Notifications(ctx context.Context, id string, send func([]byte) error, keepAlive func() error) error {
	events, stopWatch := l.store.Watch(id)
	defer stopWatch()
	tick := time.NewTicker(l.d.o.KeepAlive)
	defer tick.Stop()
	for {
		s, err := l.store.Get(ctx, id)
		if err != nil {
			return err
		}
		var sub *hub.Subscription
		if s.Version != "" { // nothing is told before initialize
			if sub, err = l.d.o.Hub.Subscribe(ctx, legacyFilter(s)); err != nil {
				return err
			}
		}
		again, err := l.deliver(ctx, id, sub, events, tick.C, send, keepAlive)
		if sub != nil {
			sub.Close()
		}
		if !again {
			return err
		}
	}
}

// deliver writes one hub subscription's events (none while sub is nil)
// until the session changes (again: subscribe anew) or the stream ends.
func (l *Legacy) deliver(ctx context.Context, id string, sub *hub.Subscription, events <-chan session.Event, tick <-chan time.Time, send func([]byte) error, keepAlive func() error) (again bool, err error) {
	var hubEvents <-chan hub.Event
	var hubEnded <-chan struct{}
	if sub != nil {
		hubEvents, hubEnded = sub.Events(), sub.Ended()
	}
	for {
		select {
		case ev := <-hubEvents:
			if err := send(legacyEvent(ev)); err != nil {
				return false, err
			}
		case ev := <-events:
			if ev.Ended {
				return false, session.ErrUnknown
			}
			return true, nil
		case <-tick:
			if _, err := l.store.Get(ctx, id); err != nil {
				return false, err
			}
			if err := keepAlive(); err != nil {
				return false, err
			}
		case <-hubEnded:
			return false, sub.Err()
		case <-ctx.Done():
			return false, nil
		}
	}
}

// legacyFilter is what a legacy session is told of: every list's changes,
// and its subscribed resources.
func legacyFilter(s *session.Session) mcp.SubscriptionFilter {
	f := mcp.SubscriptionFilter{ResourceSubscriptions: s.Subscriptions}
	for _, lc := range mcp.ListChanges {
		*lc.Wanted(&f) = true
	}
	return f
}

func legacyEvent(ev hub.Event) []byte {
	if ev.List != nil {
		b, _ := jsonrpc.Notification(ev.List.Notification, struct{}{})
		return b
	}
	b, _ := jsonrpc.Notification(mcp.NotifyResourceUpdated, map[string]string{"uri": ev.URI})
	return b
}

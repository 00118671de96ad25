// Package redisbus delivers the messages of one Redis pub/sub channel to a
// replica, and says when some may have been missed.
//
// go-redis subscribes again by itself when its connection drops. A Sentinel
// failover does not drop it: the old master keeps its subscribers until
// Sentinel reconfigures it (seconds later, or not at all while it is cut
// off), while publishers already write to the new master, so a subscriber
// would hear nothing and not know it. With Sentinel the bus therefore also
// listens to the sentinels' +switch-master announcements and moves its
// subscription to the new master at once. Every subscription after the
// first is reported as a loss: what was published in between is gone, and
// the receiver must act as if it had missed anything.
package redisbus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewOrigin names this replica in the messages it publishes, so that it
// can skip its own when they come back to it.
func NewOrigin() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Bus is one channel of one Redis deployment.
type Bus struct {
	Client  redis.UniversalClient
	Options *redis.UniversalOptions // Sentinel when MasterName is set
	Channel string
}

// Listen calls deliver with each message's payload and lost each time the
// subscription was made again after an interruption, until ctx is done. It
// calls them from one goroutine, in order.
func (b Bus) Listen(ctx context.Context, deliver func(payload string), lost func()) {
	switches := b.watchSwitches(ctx)
	subscribed := false
	for ctx.Err() == nil {
		ps := b.Client.Subscribe(ctx, b.Channel)
		subscribed = b.deliver(ctx, ps, switches, subscribed, deliver, lost)
		ps.Close()
	}
}

// deliver reads one subscription until ctx is done or the master moved,
// and reports whether a subscription was ever confirmed.
func (b Bus) deliver(ctx context.Context, ps *redis.PubSub, switches <-chan struct{}, subscribed bool, deliver func(string), lost func()) bool {
	ch := ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(5 * time.Second))
	for {
		select {
		case <-ctx.Done():
			return subscribed
		case <-switches:
			return subscribed
		case m, ok := <-ch:
			if !ok {
				return subscribed
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind != "subscribe" {
					continue
				}
				if subscribed && lost != nil {
					lost()
				}
				subscribed = true
			case *redis.Message:
				deliver(m.Payload)
			}
		}
	}
}

// watchSwitches signals each time a sentinel announces that the master
// moved. Without Sentinel it returns nil, which never signals.
func (b Bus) watchSwitches(ctx context.Context) <-chan struct{} {
	if b.Options == nil || b.Options.MasterName == "" {
		return nil
	}
	out := make(chan struct{}, 1)
	for _, addr := range b.Options.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{
			Addr:      addr,
			Username:  b.Options.SentinelUsername,
			Password:  b.Options.SentinelPassword,
			TLSConfig: b.Options.TLSConfig,
			Dialer:    b.Options.Dialer,
		})
		go func() {
			defer sc.Close()
			ps := sc.Subscribe(ctx, "+switch-master")
			defer ps.Close()
			ch := ps.Channel()
			for {
				select {
				case <-ctx.Done():
					return
				case m, ok := <-ch:
					if !ok {
						return
					}
					// "<name> <old ip> <old port> <new ip> <new port>"
					if name, _, _ := strings.Cut(m.Payload, " "); name != b.Options.MasterName {
						continue
					}
					select {
					case out <- struct{}{}:
					default: // one move pending is enough
					}
				}
			}
		}()
	}
	return out
}

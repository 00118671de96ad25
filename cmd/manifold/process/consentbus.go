package process

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/redisbus"
)

// consentBus is the Redis channel on which replicas tell each other of
// the consents completed on them. A consent's callback reaches the replica
// public_url names, while the streams of the principal who consented may
// be open on any replica: each must tell its own that the upstream's lists
// changed. A message names the upstream and the principal's key (never a
// token); one lost (Redis down at that moment) leaves a stream untold, and
// its caller sees the tools at its next list.
type consentBus struct {
	bus     redisbus.Bus
	origin  string // this replica, whose own messages its hub was told of already
	timeout time.Duration
	log     *slog.Logger

	cancel context.CancelFunc
	done   sync.WaitGroup
}

// consentMessage is one consent completed, as published.
type consentMessage struct {
	Origin    string `json:"origin"`
	Upstream  string `json:"upstream"`
	Principal string `json:"principal"`
}

func newConsentBus(rdb redis.UniversalClient, opts redis.UniversalOptions, channel string, timeout time.Duration, log *slog.Logger) *consentBus {
	return &consentBus{bus: redisbus.Bus{Client: rdb, Options: &opts, Channel: channel}, origin: redisbus.NewOrigin(), timeout: timeout, log: log}
}

// publish tells the other replicas that principal consented to upstream.
func (b *consentBus) publish(upstream, principal string) {
	msg, _ := json.Marshal(consentMessage{Origin: b.origin, Upstream: upstream, Principal: principal})
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	if err := b.bus.Client.Publish(ctx, b.bus.Channel, msg).Err(); err != nil {
		b.log.Warn("oauth: the other replicas could not be told of a consent; the principal's streams there learn of it at their next list",
			"upstream", upstream, "err", err)
	}
}

// listen passes the other replicas' consents to connected, until stop.
func (b *consentBus) listen(connected func(upstream, principal string)) {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	b.done.Add(1)
	go func() {
		defer b.done.Done()
		b.bus.Listen(ctx, func(payload string) {
			var m consentMessage
			if json.Unmarshal([]byte(payload), &m) == nil && m.Origin != b.origin {
				connected(m.Upstream, m.Principal)
			}
		}, func() {
			b.log.Info("oauth: the replicas' consent channel was re-established; a stream whose principal consented on another replica meanwhile learns of it at its next list")
		})
	}()
}

// stop ends listen, before the client it reads is closed.
func (b *consentBus) stop() {
	if b.cancel != nil {
		b.cancel()
	}
	b.done.Wait()
}

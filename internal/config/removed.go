package config

import (
	"fmt"
	"reflect"
	"time"
)

// Values that were keys once and are now simply right (issue #38): a file
// that still sets one is refused, told what replaced it (removedKeys).
const (
	// UpstreamRetries is how many times an idempotent call to an HTTP
	// upstream is sent again after a connection error, a 429 or a
	// 502/503/504: a blip is absorbed, an outage is not prolonged.
	UpstreamRetries = 2
	// UpstreamIdleConns is how many idle connections to one HTTP upstream
	// are kept for reuse: more than the calls a replica has in flight at
	// once to one server, so a busy hop never opens one per call.
	UpstreamIdleConns = 64
	// RedisBreakerFailures consecutive failures of Redis (as the cache and
	// the OAuth grants' store use it) have it skipped for
	// RedisBreakerCooldown, after which one request probes it: a dead Redis
	// costs a request nothing, a revived one is back within seconds.
	RedisBreakerFailures = 5
	RedisBreakerCooldown = 5 * time.Second
	// SubscriberQueue is how many notifications may wait for one slow
	// subscriber before its stream is ended (it may listen again); its
	// cost is charged against subscriptions.max_bytes.
	SubscriberQueue = 64
	// WatchedStreams is how many full listens' worth of resources
	// (subscriptions.max_uris_per_stream) one upstream is asked to watch
	// at most.
	WatchedStreams = 10
)

// removedKeys are the keys a file may still carry from before they went,
// by the struct they were in, each with what took their place.
var removedKeys = map[reflect.Type]map[string]string{
	reflect.TypeFor[Upstream](): {
		"retries":        fmt.Sprintf("an idempotent call to an HTTP upstream is retried %d times after a connection error, 429 or 502-504, fixed", UpstreamRetries),
		"max_idle_conns": fmt.Sprintf("Manifold keeps up to %d idle connections to each HTTP upstream, fixed", UpstreamIdleConns),
		"inherit_env":    `a child gets PATH, HOME, LANG and TMPDIR from Manifold's environment, plus env: name there what else it needs, e.g. {SSL_CERT_FILE: "${SSL_CERT_FILE}"}`,
	},
	reflect.TypeFor[Redis](): {
		"encrypt_private":  "private entries in Redis are always sealed (AES-256-GCM, a key per caller derived from cache.secret, which Redis requires)",
		"breaker_failures": breakerFixed,
		"breaker_cooldown": breakerFixed,
	},
	reflect.TypeFor[Subscriptions](): {
		"max_streams":           "subscriptions.max_bytes bounds the open streams (each holds 20 KiB at least)",
		"queue":                 fmt.Sprintf("a subscriber's queue holds %d notifications, fixed, charged against subscriptions.max_bytes", SubscriberQueue),
		"max_uris_per_upstream": "an upstream is asked to watch at most ten times subscriptions.max_uris_per_stream",
	},
	reflect.TypeFor[Audit](): {
		"format": "the audit log is JSON lines, its only format",
	},
}

var breakerFixed = fmt.Sprintf("Redis is skipped for %s after %d consecutive failures, fixed", RedisBreakerCooldown, RedisBreakerFailures)

// removedKey is what replaced key of struct t, if it was removed.
func removedKey(t reflect.Type, key string) (string, bool) {
	why, ok := removedKeys[t][key]
	return why, ok
}

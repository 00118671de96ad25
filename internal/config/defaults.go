package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ByteSize is a size in bytes, written as a number or with a unit:
// 1048576, 512KiB, 16MiB, 1GiB (also KB, MB, GB as powers of 1000).
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSpace(n.Value)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return fmt.Errorf("%q is not a size (bytes, or a number with KiB, MiB or GiB)", n.Value)
	}
	*b = ByteSize(v * mult)
	return nil
}

// Defaults for keys the file leaves out.
const (
	DefaultListen           = "127.0.0.1:8080"
	DefaultMaxRequestBytes  = 1 << 20
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultCursorTTL        = time.Hour
	DefaultTimeout          = 30 * time.Second
	DefaultCallTimeout      = 5 * time.Minute
	TransportAuto           = "auto"
	TransportHTTP           = "http"
	TransportSSE            = "sse"
	TransportStdio          = "stdio"
	CacheKeyCredential      = "credential"
	CacheKeyPrincipal       = "principal"
	DefaultMaxResponseBytes = 16 << 20
	DefaultMemoryBytes      = 64 << 20
	DefaultMaxEntryBytes    = 1 << 20
	DefaultMaxTTL           = time.Hour
	DefaultStaleIfError     = 5 * time.Minute
	DefaultRedisTimeout     = 100 * time.Millisecond
	DefaultRedisPrefix      = "manifold:"
	DefaultProbeInterval    = 3 * time.Second
)

func (c *Config) applyDefaults() {
	setDefault(&c.Listen, DefaultListen)
	setDefault(&c.Namespace, NamespacePrefix)
	setDefault(&c.MaxRequestBytes, DefaultMaxRequestBytes)
	setDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&c.ReadTimeout, 30*time.Second)
	setDefault(&c.CursorTTL, DefaultCursorTTL)
	setDefault(&c.Log.Level, "info")
	setDefault(&c.Log.Format, "text")
	setDefault(&c.Subscriptions.KeepAlive, 25*time.Second)
	setDefault(&c.Subscriptions.MaxURIsPerStream, 1000)
	setDefault(&c.Subscriptions.MaxBytes, 256<<20)
	setDefault(&c.Sessions.IdleTimeout, 30*time.Minute)
	setDefault(&c.Sessions.Max, 10_000)
	// A host opens one session per connection: a hundred is more than one
	// user's hosts need, and a tenth of the whole leaves room for at least
	// ten callers whatever max is.
	setDefault(&c.Sessions.MaxPerPrincipal, min(100, max(1, c.Sessions.Max/10)))
	setDefault(&c.Auth.JWT.Leeway, 30*time.Second)
	setDefault(&c.Health.ProbeInterval, DefaultProbeInterval)
	for _, l := range []*RateLimit{&c.Limits.PerPrincipal, &c.Limits.PerUpstream} {
		setDefault(&l.Burst, int(math.Ceil(l.Rate)))
	}
	c.Cache.applyDefaults()
	for i := range c.Upstreams {
		c.Upstreams[i].applyDefaults()
	}
}

func (cc *Cache) applyDefaults() {
	if cc.Memory.MaxBytes == nil {
		n := ByteSize(DefaultMemoryBytes)
		cc.Memory.MaxBytes = &n
	}
	if cc.StaleIfError == nil {
		d := DefaultStaleIfError
		cc.StaleIfError = &d
	}
	if len(cc.CredentialHeaders) == 0 {
		cc.CredentialHeaders = []string{"Authorization"}
	}
	setDefault(&cc.MaxEntryBytes, DefaultMaxEntryBytes)
	setDefault(&cc.MaxTTL, DefaultMaxTTL)
	setDefault(&cc.RefreshAhead, "public")
	setDefault(&cc.Redis.Prefix, DefaultRedisPrefix)
	setDefault(&cc.Redis.Timeout, DefaultRedisTimeout)
}

func (u *Upstream) applyDefaults() {
	setDefault(&u.Protocol, ProtocolAuto)
	setDefault(&u.Timeout, DefaultTimeout)
	setDefault(&u.CallTimeout, DefaultCallTimeout)
	setDefault(&u.MaxResponseBytes, DefaultMaxResponseBytes)
	setDefault(&u.CacheKey, CacheKeyCredential)
	setDefault(&u.Transport, TransportAuto)
	setDefault(&u.DefaultScope, "private")
	u.ToolCache.applyDefaults()
}

// setDefault sets *v to def when the file left it at its zero value.
func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

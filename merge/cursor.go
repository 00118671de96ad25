package merge

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// Cursor is the pagination position across every upstream: for each upstream
// still to be read, the cursor to send it ("" for its first page). An upstream
// absent from Pending is exhausted.
type Cursor struct {
	Method string `json:"m"`
	// View names the endpoint's view the listing is of ("" for the main
	// endpoint's): a cursor is good only where it was handed out, so one
	// view's pages never continue another's listing.
	View    string            `json:"v,omitempty"`
	Issued  int64             `json:"t"` // unix seconds
	Pending map[string]string `json:"p"`
}

// Codec seals cursors so that clients can carry them but not forge them:
// the downstream cursor is base64url(JSON) + "." + base64url(HMAC-SHA256).
// Replicas that share the secret accept each other's cursors.
type Codec struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time
}

// NewCodec returns a codec signing with secret; cursors older than ttl are
// refused as stale.
func NewCodec(secret []byte, ttl time.Duration) *Codec {
	return &Codec{secret: secret, ttl: ttl, now: time.Now}
}

// MaxUpstreamCursor bounds the cursor one upstream may hand Manifold to
// keep (a page whose nextCursor is longer is refused as malformed), and
// maxCursorLen what Decode looks at. Encode refuses to seal what Decode
// would refuse: a cursor a client cannot bring back must not be issued.
const (
	MaxUpstreamCursor = 1 << 10
	maxCursorLen      = 64 << 10
)

// Errors Decode returns; the router answers all of them with -32602.
var (
	ErrBadCursor   = errors.New("invalid cursor")
	ErrStaleCursor = errors.New("cursor has expired; list again from the start")
)

// ErrCursorTooLong: the upstreams' pending cursors, together, make a cursor
// longer than Decode accepts.
var ErrCursorTooLong = errors.New("the upstreams' cursors are too long to carry")

// Encode seals c.
func (k *Codec) Encode(c Cursor) (string, error) {
	c.Issued = k.now().Unix()
	payload, _ := json.Marshal(c) // a Cursor always marshals
	p := base64.RawURLEncoding.EncodeToString(payload)
	s := p + "." + base64.RawURLEncoding.EncodeToString(k.mac(p))
	if len(s) > maxCursorLen {
		return "", ErrCursorTooLong
	}
	return s, nil
}

func (k *Codec) mac(p string) []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte("manifold-cursor-v1\x00"))
	m.Write([]byte(p))
	return m.Sum(nil)
}

// Decode verifies and opens s, which must have been issued for method.
func (k *Codec) Decode(s, method string) (Cursor, error) {
	var c Cursor
	if len(s) > maxCursorLen {
		return c, ErrBadCursor
	}
	p, sig, ok := strings.Cut(s, ".")
	if !ok {
		return c, ErrBadCursor
	}
	// Strict: otherwise the unused bits of the last character could vary,
	// and one cursor would have several spellings.
	got, err := base64.RawURLEncoding.Strict().DecodeString(sig)
	if err != nil || !hmac.Equal(got, k.mac(p)) {
		return c, ErrBadCursor
	}
	payload, err := base64.RawURLEncoding.Strict().DecodeString(p)
	if err != nil || json.Unmarshal(payload, &c) != nil || c.Method != method {
		return Cursor{}, ErrBadCursor
	}
	if age := k.now().Sub(time.Unix(c.Issued, 0)); age > k.ttl || age < -time.Minute {
		return Cursor{}, ErrStaleCursor
	}
	return c, nil
}

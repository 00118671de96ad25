package auth

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"golang.org/x/sync/singleflight"
)

const (
	// maxJWKSBytes bounds a key set read from the network or a file.
	maxJWKSBytes = 1 << 20
	// refetchEvery is the least time between two fetches that a token
	// naming an unknown key causes: a flood of tokens with made-up key ids
	// costs the issuer one fetch per interval, not one per token, while a
	// real rotation waits at most this long.
	refetchEvery = 2 * time.Second
	// maxKeyAge makes a set older than this be fetched again on next use
	// (in the background when it holds the key asked for), so a key the
	// issuer withdrew stops verifying once the issuer can be reached.
	maxKeyAge = 10 * time.Minute
	// keyWait bounds how long a request waits for a fetch of the key set;
	// the fetch itself goes on (with its retries) for the requests after
	// it. A caller waiting longer than this for an answer that is not about
	// its token is better told to come back.
	keyWait = 2 * time.Second
)

// keySource holds an issuer's keys: loaded at start, and loaded again when
// a token names a key it does not hold (rotation) or the set is old.
type keySource struct {
	name  string // the URL or file, for logs
	load  func(ctx context.Context) (jwk.Set, error)
	log   *slog.Logger
	group singleflight.Group

	mu      sync.Mutex
	set     jwk.Set
	loaded  time.Time // when set was loaded
	tried   time.Time // the last attempt, successful or not
	lastErr error
}

func newKeySource(o JWTOptions, log *slog.Logger) *keySource {
	s := &keySource{name: o.JWKSURL, log: log}
	if o.JWKSFile != "" {
		s.name = o.JWKSFile
		s.load = func(context.Context) (jwk.Set, error) { return readJWKSFile(o.JWKSFile) }
		return s
	}
	client := o.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	s.load = func(ctx context.Context) (jwk.Set, error) { return fetchJWKS(ctx, client, o.JWKSURL) }
	return s
}

// key returns the key named kid ("" when the set holds exactly one key).
// A set past maxKeyAge that holds the key still verifies with it while a
// fresh one is fetched: an issuer's outage must not stop the tokens it
// already signed. When the key is not held and the set cannot be had (the
// last load failed, or did not finish within keyWait), the error is
// ErrKeysUnavailable: nothing is known about the token.
func (s *keySource) key(ctx context.Context, kid string) (jwk.Key, error) {
	s.mu.Lock()
	set, old := s.set, time.Since(s.loaded) > maxKeyAge
	s.mu.Unlock()
	if set != nil {
		if k, ok := lookupKey(set, kid); ok {
			if old {
				s.group.DoChan("load", s.load1(ctx))
			}
			return k, nil
		}
	}
	set, err := s.reload(ctx)
	if set != nil {
		if k, ok := lookupKey(set, kid); ok {
			return k, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeysUnavailable, s.name, err)
	}
	return nil, fmt.Errorf("no key %q in the issuer's key set", kid)
}

func lookupKey(set jwk.Set, kid string) (jwk.Key, bool) {
	if kid == "" {
		if set.Len() == 1 {
			return set.Key(0)
		}
		return nil, false
	}
	return set.LookupKeyID(kid)
}

// errSlow is a load that has not finished within keyWait.
var errSlow = fmt.Errorf("no answer within %v", keyWait)

// reload loads the set again, once for all concurrent callers and at most
// once per refetchEvery, and returns the set held and the last load's
// error; a caller waits for the load at most keyWait.
func (s *keySource) reload(ctx context.Context) (jwk.Set, error) {
	done := s.group.DoChan("load", s.load1(ctx))
	wait := time.NewTimer(keyWait)
	defer wait.Stop()
	var err error
	select {
	case <-done:
	case <-wait.C:
		err = errSlow
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		err = s.lastErr
	}
	return s.set, err
}

// load1 is one load of the set, the flight reload waits on: skipped
// within refetchEvery of the last attempt. It outlives the request that
// started it (its own deadline is the client's), so the requests after
// it get its outcome.
func (s *keySource) load1(ctx context.Context) func() (any, error) {
	ctx = context.WithoutCancel(ctx)
	return func() (any, error) {
		s.mu.Lock()
		if time.Since(s.tried) < refetchEvery {
			s.mu.Unlock()
			return nil, nil
		}
		s.tried = time.Now()
		s.mu.Unlock()
		set, err := s.load(ctx)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.lastErr = err
			s.log.Warn("jwks: loading the issuer's keys failed", "from", s.name, "err", err)
			return nil, nil
		}
		s.set, s.loaded, s.lastErr = set, time.Now(), nil
		s.log.Info("jwks: issuer's keys loaded", "from", s.name, "keys", set.Len())
		return nil, nil
	}
}

func fetchJWKS(ctx context.Context, client *http.Client, url string) (jwk.Set, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching %s: HTTP %d", url, resp.StatusCode)
	}
	return parseJWKS(io.LimitReader(resp.Body, maxJWKSBytes+1))
}

func readJWKSFile(path string) (jwk.Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseJWKS(io.LimitReader(f, maxJWKSBytes+1))
}

func parseJWKS(r io.Reader) (jwk.Set, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading the key set: %w", err)
	}
	if len(b) > maxJWKSBytes {
		return nil, fmt.Errorf("the key set is larger than %d bytes", maxJWKSBytes)
	}
	set, err := jwk.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("parsing the key set: %w", err)
	}
	return set, nil
}

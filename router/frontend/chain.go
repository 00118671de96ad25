package frontend

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/loopback"
	"github.com/manifold-mcp/manifold/internal/ratelimit"
)

// A Link is one cross-cutting concern of an HTTP frontend: it looks at a
// request, and either answers it or hands it to the next handler. Each does
// one thing, and the order they run in is written in one place (Chain).
type Link func(next http.Handler) http.Handler

// Chain wraps h in links; a request meets them in the order given, the
// first outermost.
func Chain(h http.Handler, links ...Link) http.Handler {
	for i := len(links) - 1; i >= 0; i-- {
		h = links[i](h)
	}
	return h
}

// Recover answers a panic below it with an internal error, logged with its
// stack, instead of a dropped connection.
func Recover(log *slog.Logger) Link {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if p := recover(); p != nil {
					if p == http.ErrAbortHandler {
						panic(p)
					}
					log.Error("panic serving request", "panic", p, "stack", string(debug.Stack()))
					writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "internal error"), http.StatusInternalServerError)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// CheckHost is DNS-rebinding protection: a browser tricked into sending a
// request to a loopback Manifold still sends the attacker's Host. Loopback
// hosts pass, and those of allowed (an entry without a port matches any
// port; "*" matches everything); others get 403.
func CheckHost(allowed []string) Link {
	return refuse(http.StatusForbidden, func(r *http.Request) string {
		if hostAllowed(allowed, r.Host) {
			return ""
		}
		return fmt.Sprintf("forbidden: Host %q is not allowed", r.Host)
	})
}

// CheckOrigin refuses (403) a browser request from an origin that is
// neither loopback nor in allowed ("*" matches everything).
func CheckOrigin(allowed []string) Link {
	return refuse(http.StatusForbidden, func(r *http.Request) string {
		o := r.Header.Get("Origin")
		if o == "" || originAllowed(allowed, o) {
			return ""
		}
		return fmt.Sprintf("forbidden: Origin %q is not allowed", o)
	})
}

// Authenticate admits only callers a knows, before the body is read and
// long before any cache is consulted: a caller who is not admitted learns
// nothing, public entries included. It answers the others 401 with a
// challenge naming the protected resource metadata (RFC 9728), which tells
// an MCP client where to get a token, and passes the principal on in the
// request's context. A token that could not be checked because the
// issuer's keys are unavailable gets 503 with Retry-After instead: the
// caller is not told its token is bad. With authentication off it admits
// everyone, and upstreams judge the credentials forwarded to them.
func Authenticate(a *auth.Authenticator, res auth.Resource, log *slog.Logger) Link {
	if !a.Enabled() {
		return func(next http.Handler) http.Handler { return next }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := a.Authenticate(r.Context(), r)
			if errors.Is(err, auth.ErrKeysUnavailable) {
				// Not the token's fault: the identity provider's.
				log.Debug("token not checked: the issuer's keys are unavailable", "err", err, "remote", r.RemoteAddr)
				w.Header().Set("Retry-After", strconv.Itoa(int(auth.RetryAfter/time.Second)))
				writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the identity provider's keys are unavailable: retry later"), http.StatusServiceUnavailable)
				return
			}
			if err != nil {
				invalid := errors.Is(err, auth.ErrInvalidToken)
				if invalid {
					log.Debug("token refused", "err", err, "remote", r.RemoteAddr)
				}
				w.Header().Set("WWW-Authenticate", res.Challenge(r, invalid))
				writeError(w, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "unauthorized: a valid bearer token is required"), http.StatusUnauthorized)
				return
			}
			ctx := auth.WithPrincipal(r.Context(), p)
			if c, ok := a.Presented(r); ok {
				ctx = auth.WithCredential(ctx, c) // for an upstream that exchanges it, this request only
			}
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// RateLimit serves a caller only within its principal's rate (a caller
// without one is keyed by its address), before the body is read and before
// the cache is consulted: hits count too, since the limit protects Manifold
// as well as the upstreams. Beyond it: 429, Retry-After, and a JSON-RPC
// error. limited, if set, counts the refusals.
func RateLimit(l *ratelimit.Limiter, limited func()) Link {
	if l == nil {
		return func(next http.Handler) http.Handler { return next }
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := "addr:" + remoteHost(r)
			if p := auth.From(r.Context()); p != nil {
				key = p.ID
			}
			if ok, after := l.Allow(r.Context(), key); !ok {
				if limited != nil {
					limited()
				}
				e := ratelimit.Error("per principal", after)
				setRetryAfter(w, e)
				writeError(w, nil, e, http.StatusTooManyRequests)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// SingleValued refuses (400) a request that repeats one of headers: with
// two Authorization headers, one would be checked and both forwarded.
func SingleValued(headers []string) Link {
	return refuse(http.StatusBadRequest, func(r *http.Request) string {
		for _, h := range headers {
			if len(r.Header.Values(h)) > 1 {
				return fmt.Sprintf("header %s must not be repeated", http.CanonicalHeaderKey(h))
			}
		}
		return ""
	})
}

// LimitBody bounds the request body to n bytes; a frontend reading past it
// gets an *http.MaxBytesError and answers 413.
func LimitBody(n int64) Link {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, n)
			next.ServeHTTP(w, r)
		})
	}
}

// refuse makes a Link of a check that returns why a request is refused
// ("" to admit it).
func refuse(status int, why func(*http.Request) string) Link {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if msg := why(r); msg != "" {
				writeError(w, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: msg}, status)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func hostAllowed(allowed []string, hostport string) bool {
	host, port := splitHostPort(hostport)
	if loopback.Host(host) {
		return true
	}
	for _, a := range allowed {
		if a == "*" {
			return true
		}
		ah, ap := splitHostPort(a)
		if strings.EqualFold(ah, host) && (ap == "" || ap == port) {
			return true
		}
	}
	return false
}

func originAllowed(allowed []string, origin string) bool {
	for _, a := range allowed {
		if a == "*" || strings.EqualFold(strings.TrimSuffix(a, "/"), origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return loopback.Host(u.Hostname())
}

func splitHostPort(hp string) (host, port string) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		return strings.Trim(h, "[]"), p
	}
	return strings.Trim(hp, "[]"), ""
}

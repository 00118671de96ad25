package router

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/auth"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/panics"
	"github.com/manifold-mcp/manifold/internal/seal"
)

// The bridge between a modern caller and a legacy upstream. A legacy server
// asks its questions (sampling, elicitation, roots) as requests in the
// middle of a call; a modern caller can only be asked by an answer, an
// input_required result, after which it retries the request with its
// responses. So a call that asks is held: it keeps running, detached from
// the caller's HTTP request, while the caller gets input_required with a
// requestState sealed by Manifold; the retry unseals it, finds the held
// call, hands it the caller's response, and waits for the next question or
// the result. A held call waits HoldTime for the retry, then is cancelled.
// Holds live in one process: a retry that reaches another replica, or
// comes after the hold ended, is refused with -32602. A hold belongs to the
// caller that made the call (its principal and its credential): anyone
// else's retry is refused the same way and leaves the hold to its owner.

// HoldTime is how long a held call waits for its caller's retry.
const HoldTime = 60 * time.Second

// statePrefix marks a requestState of a held call (an upstream's own goes
// out sealed for its caller: passstate.go).
const statePrefix = "manifold.hold."

type holds struct {
	secret      []byte
	pass        *seal.Sealer // an upstream's own requestState (passstate.go)
	replica     string
	credentials []string // the request headers that make up a credential

	mu    sync.Mutex
	byID  map[string]*hold
	count uint64
}

// hold is one call in flight whose upstream asked its caller something.
type hold struct {
	id      string
	owner   string        // ownerOf the caller whose call it is
	asked   chan question // the upstream's questions, one at a time
	done    chan answered // the call's outcome
	cancel  context.CancelFunc
	pending *question   // the question put to the caller, awaiting its retry
	expiry  *time.Timer // cancels the call when the retry does not come
}

type question struct {
	msg    *jsonrpc.Message
	answer chan json.RawMessage
}

type answered struct {
	res json.RawMessage
	err error
}

func newHolds(secret []byte, credentials []string) *holds {
	r := make([]byte, 8)
	_, _ = rand.Read(r)
	return &holds{secret: secret, replica: hex.EncodeToString(r), credentials: credentials, byID: map[string]*hold{},
		pass: seal.New(secret, "manifold-pass-state")}
}

// ownerOf names the caller of req: a MAC of its principal and of its
// credential headers, so that neither another principal nor the same
// principal with another credential can pass for it.
func (hs *holds) ownerOf(ctx context.Context, req *mcp.Request) string {
	m := hmac.New(sha256.New, hs.secret)
	m.Write([]byte("manifold-hold-owner-v1\x00"))
	if p := auth.From(ctx); p != nil {
		m.Write([]byte(p.ID))
	}
	for _, name := range hs.credentials {
		for _, v := range req.Header.Values(name) {
			m.Write([]byte{0})
			m.Write([]byte(v))
		}
		m.Write([]byte{1})
	}
	return hex.EncodeToString(m.Sum(nil))
}

// held reports whether a retry resumes a held call.
func held(req *mcp.Request) bool {
	return strings.HasPrefix(req.Params.String("requestState"), statePrefix)
}

// start runs call with an Ask that holds it, and answers as soon as the
// call answers or asks.
func (hs *holds) start(ctx context.Context, req *mcp.Request, call func(context.Context, mcp.Ask) (json.RawMessage, error)) (json.RawMessage, error) {
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &hold{owner: hs.ownerOf(ctx, req), asked: make(chan question), done: make(chan answered, 1), cancel: cancel}
	ask := func(qctx context.Context, q *jsonrpc.Message) (json.RawMessage, error) {
		if need := mcp.Questions[q.Method]; need == "" || !req.Declares(need) {
			return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "the caller did not declare the %s capability", need)
		}
		qu := question{msg: q, answer: make(chan json.RawMessage, 1)}
		select {
		case h.asked <- qu:
		case <-hctx.Done():
			return nil, hctx.Err()
		}
		select {
		case a := <-qu.answer:
			return a, nil
		case <-hctx.Done():
			return nil, hctx.Err()
		}
	}
	go func() {
		var a answered
		defer func() { h.done <- a }()
		defer panics.Recover(&a.err) // a held call runs away from its caller's goroutine
		a.res, a.err = call(hctx, ask)
	}()
	return hs.wait(ctx, h)
}

// wait answers the caller with what the held call does next: its result,
// or its next question (the call is then held until the retry).
func (hs *holds) wait(ctx context.Context, h *hold) (json.RawMessage, error) {
	select {
	case a := <-h.done:
		hs.release(h)
		return a.res, a.err
	case q := <-h.asked:
		return hs.hold(h, q)
	case <-ctx.Done():
		// The caller left while the call was running: nobody will retry.
		hs.release(h)
		return nil, ctx.Err()
	}
}

// hold registers h, waiting on question q, and returns input_required.
func (hs *holds) hold(h *hold, q question) (json.RawMessage, error) {
	hs.mu.Lock()
	if h.id == "" {
		hs.count++
		h.id = fmt.Sprintf("%d", hs.count)
		hs.byID[h.id] = h
	}
	h.pending = &q
	h.expiry = time.AfterFunc(HoldTime, func() { hs.release(h) })
	hs.mu.Unlock()
	key := "q" + string(q.msg.ID)
	res := jsonrpc.Object{}
	_ = res.Set("resultType", mcp.ResultTypeInputRequired)
	_ = res.Set("inputRequests", map[string]any{key: map[string]any{"method": q.msg.Method, "params": q.msg.Params}})
	_ = res.Set("requestState", hs.seal(h.id, key))
	return res.Marshal(), nil
}

// resume hands the caller's response to the held call its requestState
// names, and waits for what the call does next.
func (hs *holds) resume(ctx context.Context, req *mcp.Request) (json.RawMessage, error) {
	id, key, err := hs.open(req.Params.String("requestState"))
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "requestState: %v", err)
	}
	owner := hs.ownerOf(ctx, req)
	hs.mu.Lock()
	h := hs.byID[id]
	if h != nil && !hmac.Equal([]byte(h.owner), []byte(owner)) {
		hs.mu.Unlock()
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "requestState: issued to another caller")
	}
	var q *question
	if h != nil && h.pending != nil && h.expiry.Stop() {
		q, h.pending = h.pending, nil
	}
	hs.mu.Unlock()
	if q == nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "requestState: the held request has ended (held at most %v) or was already answered; send the request again", HoldTime)
	}
	responses, err := req.Params.Object("inputResponses")
	answer, ok := responses[key]
	if err != nil || !ok {
		hs.release(h)
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "inputResponses must answer %q", key)
	}
	q.answer <- answer
	return hs.wait(ctx, h)
}

// release forgets h and cancels its call if it still runs.
func (hs *holds) release(h *hold) {
	hs.mu.Lock()
	if h.id != "" {
		delete(hs.byID, h.id)
	}
	hs.mu.Unlock()
	h.cancel()
}

// seal makes a requestState naming hold id and the question key, which
// only this replica can open.
func (hs *holds) seal(id, key string) string {
	return hs.sealFields(statePrefix, hs.replica, id, key)
}

func (hs *holds) open(state string) (id, key string, err error) {
	parts, err := hs.openFields(state, statePrefix, 3)
	if err != nil {
		return "", "", err
	}
	if parts[0] != hs.replica {
		return "", "", fmt.Errorf("the request is held by another replica (or one that restarted); send the request again")
	}
	return parts[1], parts[2], nil
}

// sealFields makes a requestState of prefix carrying fields, the prefix
// under the MAC too (so that one kind of state is never taken for
// another).
func (hs *holds) sealFields(prefix string, fields ...string) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(strings.Join(fields, "\x00")))
	return prefix + payload + "." + base64.RawURLEncoding.EncodeToString(hs.mac(prefix, payload))
}

// openFields checks a requestState sealFields made and returns its n
// fields.
func (hs *holds) openFields(state, prefix string, n int) ([]string, error) {
	p, sig, ok := strings.Cut(strings.TrimPrefix(state, prefix), ".")
	got, derr := base64.RawURLEncoding.Strict().DecodeString(sig)
	if !ok || derr != nil || !hmac.Equal(got, hs.mac(prefix, p)) {
		return nil, fmt.Errorf("not a requestState Manifold issued (tampered?)")
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(p)
	parts := strings.Split(string(raw), "\x00")
	if err != nil || len(parts) != n {
		return nil, fmt.Errorf("malformed")
	}
	return parts, nil
}

func (hs *holds) mac(prefix, p string) []byte {
	m := hmac.New(sha256.New, hs.secret)
	m.Write([]byte("manifold-hold-v1\x00"))
	m.Write([]byte(prefix))
	m.Write([]byte(p))
	return m.Sum(nil)
}

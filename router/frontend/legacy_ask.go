package frontend

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router/session"
)

// call runs a translated request, putting the questions of each
// input_required answer to the caller until the answer is complete.
func (l *Legacy) call(ctx context.Context, s *session.Session, req *mcp.Request, w Writer) (json.RawMessage, *jsonrpc.Error) {
	for round := 0; ; round++ {
		res, rpcErr := l.d.handle(ctx, req, w)
		if rpcErr != nil {
			return nil, rpcErr
		}
		if rt, _ := jsonrpc.Member(res, "resultType"); !jsonrpc.IsString(rt, mcp.ResultTypeInputRequired) {
			return legacyResult(res), nil
		}
		obj, err := jsonrpc.ParseObject(res)
		if err != nil {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "an upstream answered input_required with a malformed result")
		}
		if round == maxRounds {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the request still needs input after %d rounds", maxRounds)
		}
		responses, rpcErr := l.askAll(ctx, s, obj, w)
		if rpcErr != nil {
			return nil, rpcErr
		}
		retry := *req
		retry.Params = req.Params.Clone()
		retry.Params["inputResponses"] = responses.Marshal()
		if state, ok := obj["requestState"]; ok {
			retry.Params["requestState"] = state
		} else {
			delete(retry.Params, "requestState")
		}
		req = &retry
	}
}

// askAll puts each input request of an input_required result to the
// caller as a request on its session, and collects the results by key.
func (l *Legacy) askAll(ctx context.Context, s *session.Session, res jsonrpc.Object, w Writer) (jsonrpc.Object, *jsonrpc.Error) {
	requests, err := res.Object("inputRequests")
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "an upstream answered input_required with malformed inputRequests")
	}
	var caps map[string]json.RawMessage
	_ = json.Unmarshal(s.ClientCapabilities, &caps)
	out := jsonrpc.Object{}
	for key, raw := range requests {
		var q struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(raw, &q); err != nil || mcp.Questions[q.Method] == "" {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "an upstream asked for input Manifold cannot ask a legacy client (%s)", q.Method)
		}
		if _, ok := caps[mcp.Questions[q.Method]]; !ok {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the request needs the %s capability, which the client did not declare", mcp.Questions[q.Method])
		}
		result, rpcErr := l.ask(ctx, s, q.Method, withElicitationID(q.Method, q.Params), w)
		if rpcErr != nil {
			return nil, rpcErr
		}
		out[key] = result
	}
	return out, nil
}

// ask sends one request to the caller and waits for its result.
func (l *Legacy) ask(ctx context.Context, s *session.Session, method string, params json.RawMessage, w Writer) (json.RawMessage, *jsonrpc.Error) {
	id, answer, done := l.asks.open(s.ID)
	defer done()
	msg, _ := json.Marshal(&jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: id, Method: method, Params: params})
	if err := w.Notify(msg); err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot ask the client (%s): %v", method, err)
	}
	select {
	case m := <-answer:
		if m.Error != nil {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the client refused %s: %s", method, m.Error.Message)
		}
		return m.Result, nil
	case <-ctx.Done():
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cancelled while waiting for the client's answer to %s", method)
	case <-time.After(askTimeout):
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the client did not answer %s within %v", method, askTimeout)
	}
}

// withElicitationID gives a URL-mode elicitation the elicitationId
// 2025-11-25 requires (2026-07-28 has none).
func withElicitationID(method string, params json.RawMessage) json.RawMessage {
	p, err := jsonrpc.ParseObject(params)
	if method != "elicitation/create" || err != nil || p.String("mode") != "url" || p["elicitationId"] != nil {
		return params
	}
	_ = p.Set("elicitationId", session.NewID())
	return p.Marshal()
}

// askBook matches a legacy caller's answers to the questions Manifold put
// to it. A question's id carries a prefix drawn at random for this process:
// replicas share a session, an answer reaches whichever replica the caller
// posts it to, and one replica's question must never be answered with the
// answer to another's, asked in the same moment.
type askBook struct {
	mu      sync.Mutex
	prefix  string
	next    uint64
	waiting map[string]chan *jsonrpc.Message // by session id and request id
}

func (b *askBook) open(sessionID string) (json.RawMessage, <-chan *jsonrpc.Message, func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiting == nil {
		b.waiting = map[string]chan *jsonrpc.Message{}
		b.prefix = "manifold-" + rand.Text()[:12] + "-"
	}
	b.next++
	id := jsonrpc.Quote(b.prefix + strconv.FormatUint(b.next, 10))
	key := sessionID + "\x00" + string(id)
	ch := make(chan *jsonrpc.Message, 1)
	b.waiting[key] = ch
	return id, ch, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.waiting, key)
	}
}

// answer hands msg to the question it answers, if it waits here.
func (b *askBook) answer(sessionID string, msg *jsonrpc.Message) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.waiting[sessionID+"\x00"+string(msg.ID)]
	if ok {
		select {
		case ch <- msg:
		default:
		}
	}
	return ok
}

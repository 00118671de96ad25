package frontend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/ratelimit"
	"github.com/manifold-mcp/manifold/router/session"
)

// Stdio is the whole proxy on a pair of streams, for a host that launches
// its servers as processes: newline-delimited JSON-RPC, one caller, either
// era. A modern request (with `_meta` protocolVersion) is served as over
// HTTP, subscriptions included (tagged with their listen id); a legacy
// caller's initialize opens the one session of the stream, whose
// notifications are written as they come. Requests run concurrently;
// notifications/cancelled cancels one. Serve returns when the input ends.
type Stdio struct {
	d      *Dispatcher
	legacy *Legacy
	limit  int
	drain  time.Duration
	log    *slog.Logger

	out      io.Writer
	outMu    sync.Mutex
	requests sync.WaitGroup // requests running
	streams  sync.WaitGroup // the session's notifications

	mu       sync.Mutex
	inflight map[string]context.CancelFunc // by request id
	sess     *session.Session

	limiter *ratelimit.Limiter // nil: no per-principal limit
	key     string             // the stream's principal, for limiter
	limited func()
}

// NewStdio returns the stdio frontend of d; lines longer than limit bytes
// are refused; requests still running when the input ends get drain to
// finish.
func NewStdio(d *Dispatcher, limit int, drain time.Duration, log *slog.Logger) *Stdio {
	// One caller: its session lives here and dies with the stream.
	return &Stdio{d: d, legacy: NewLegacy(d, session.NewMemory(1<<62, 1)), limit: limit, drain: drain, log: log, inflight: map[string]context.CancelFunc{}}
}

// Limit makes each request of the stream pass l, keyed by key, before it
// is served, as RateLimit does over HTTP: the stream is one caller, so one
// principal. Past the limit a request is answered with the same error
// (-32000 with data.retryAfterMs); limited, if set, counts the refusals.
// Notifications and answers to the server's questions are not limited:
// nothing could be told of their refusal.
func (s *Stdio) Limit(l *ratelimit.Limiter, key string, limited func()) *Stdio {
	s.limiter, s.key, s.limited = l, key, limited
	return s
}

// admitted reports whether a request may be served, answering it
// otherwise.
func (s *Stdio) admitted(ctx context.Context, id json.RawMessage, w *lineWriter) bool {
	if s.limiter == nil {
		return true
	}
	ok, after := s.limiter.Allow(ctx, s.key)
	if !ok {
		if s.limited != nil {
			s.limited()
		}
		w.Error(id, ratelimit.Error("per principal", after))
	}
	return ok
}

// Serve reads messages from in and writes answers and notifications to out
// until in ends or ctx does; the requests still running then get the drain
// time to answer before they are cancelled.
func (s *Stdio) Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	s.out = out
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		finished := make(chan struct{})
		go func() { s.requests.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(s.drain):
		case <-ctx.Done():
		}
		cancel()
		<-finished
		s.streams.Wait()
		_ = s.legacy.store.Close()
	}()
	br := bufio.NewReaderSize(in, 64<<10)
	for ctx.Err() == nil {
		line, err := readLine(br, s.limit)
		if len(bytes.TrimSpace(line)) > 0 {
			s.contained(ctx, line)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
	return nil
}

// readLine reads one line; a line over max is read to its end and
// reported.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) <= max+1 {
			line = append(line, frag...)
		} else {
			line = []byte{0} // over the limit: keep nothing, remember it
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}

// contained is message, a panic in it answered with an internal error and
// logged, as the HTTP frontend's Recover link does: the stream goes on.
func (s *Stdio) contained(ctx context.Context, line []byte) {
	defer s.recovered(nil)
	s.message(ctx, line)
}

// recovered, deferred, answers a panic of the request id (nil: of no
// request known yet) with an internal error, and logs it with its stack.
func (s *Stdio) recovered(id json.RawMessage) {
	if p := recover(); p != nil {
		s.log.Error("panic serving request", "panic", p, "stack", string(debug.Stack()))
		s.write(jsonrpc.AppendError(nil, id, jsonrpc.Errorf(jsonrpc.CodeInternalError, "internal error")))
	}
}

func (s *Stdio) message(ctx context.Context, line []byte) {
	if len(line) == 1 && line[0] == 0 {
		s.write(jsonrpc.AppendError(nil, nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "message larger than %d bytes", s.limit)))
		return
	}
	msg, rpcErr := jsonrpc.Decode(line)
	if rpcErr != nil {
		var id json.RawMessage
		if msg != nil {
			id = msg.ID
		}
		s.write(jsonrpc.AppendError(nil, id, rpcErr))
		return
	}
	switch {
	case isLegacyInitialize(msg):
		// Before anything after it is read: what follows is the session's.
		s.initialize(ctx, msg, &lineWriter{s: s})
	case msg.IsRequest():
		rctx, cancel := context.WithCancel(ctx)
		s.mu.Lock()
		s.inflight[string(msg.ID)] = cancel
		s.mu.Unlock()
		s.requests.Add(1)
		go func() {
			defer s.requests.Done()
			defer s.done(msg.ID, cancel)
			defer s.recovered(msg.ID)
			s.request(rctx, msg)
		}()
	case msg.Method == mcp.NotifyCancelled:
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(msg.Params, &p) == nil {
			s.mu.Lock()
			if cancel := s.inflight[string(p.RequestID)]; cancel != nil {
				cancel()
			}
			s.mu.Unlock()
		}
	case msg.IsResponse():
		if sess := s.session(); sess != nil {
			s.legacy.Message(ctx, sess, msg)
		}
	}
}

func (s *Stdio) done(id json.RawMessage, cancel context.CancelFunc) {
	s.mu.Lock()
	delete(s.inflight, string(id))
	s.mu.Unlock()
	cancel()
}

func (s *Stdio) session() *session.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess
}

// request serves one request of either era.
func (s *Stdio) request(ctx context.Context, msg *jsonrpc.Message) {
	w := &lineWriter{s: s}
	if !s.admitted(ctx, msg.ID, w) {
		return
	}
	if sess := s.session(); sess != nil && !isModern(msg) {
		// The session's state may have changed since: read it afresh.
		if current, err := s.legacy.Session(ctx, sess.ID); err == nil {
			s.legacy.Serve(ctx, current, msg, nil, w)
			return
		}
	}
	req, rpcErr := Validate(msg, nil)
	if rpcErr != nil {
		w.Error(msg.ID, rpcErr)
		return
	}
	s.d.Serve(ctx, msg.ID, req, w)
}

// initialize opens the stream's session and starts writing its
// notifications.
func (s *Stdio) initialize(ctx context.Context, msg *jsonrpc.Message, w *lineWriter) {
	if s.session() != nil {
		w.Error(msg.ID, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the session is initialized already"))
		return
	}
	if !s.admitted(ctx, msg.ID, w) {
		return
	}
	sess, res, rpcErr := s.legacy.Initialize(ctx, msg)
	if rpcErr != nil {
		w.Error(msg.ID, rpcErr)
		return
	}
	s.mu.Lock()
	s.sess = sess
	s.mu.Unlock()
	w.Result(msg.ID, res)
	s.streams.Add(1)
	go func() {
		defer s.streams.Done()
		// ctx is the stream's (initialize is read in line, not as a
		// request): notifications last as long as the stream does.
		err := s.legacy.Notifications(ctx, sess.ID, func(b []byte) error { s.write(b); return nil }, func() error { return nil })
		if err != nil && !errors.Is(err, session.ErrUnknown) {
			s.log.Debug("stdio session notifications ended", "err", err)
		}
	}()
}

// write writes one message as a line; lines never interleave.
func (s *Stdio) write(b []byte) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	_, _ = s.out.Write(append(b, '\n'))
}

// lineWriter is the Writer of one stdio request.
type lineWriter struct{ s *Stdio }

func (w *lineWriter) Notify(msg []byte) error {
	w.s.write(msg)
	return nil
}

func (w *lineWriter) Result(id, result json.RawMessage) {
	w.s.write(jsonrpc.AppendResult(nil, id, result))
}

func (w *lineWriter) Error(id json.RawMessage, e *jsonrpc.Error) {
	w.s.write(jsonrpc.AppendError(nil, id, e))
}

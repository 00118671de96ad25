package transport

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// stopGrace is how long a child gets after stdin closes, and again after
// SIGTERM, before the next step.
const stopGrace = 2 * time.Second

// stdioConn runs the server as a child process, kept running by a
// supervisor: a process that exits is started again after a backoff. Each
// start is a new generation, so sessions negotiated with a dead process are
// recognised as gone.
type stdioConn struct {
	o      Options
	log    *slog.Logger
	onMsg  OnMessage
	health Health
	sup    supervisor[*process] // the one process, unless run per principal
	kids   *children            // a process per principal (children.go), or nil
}

// ErrProcessExited: the child died with the call in flight.
var ErrProcessExited = errors.New("process exited before answering")

// errRestarting: the child died and waits out its restart backoff; calls
// fail at once rather than wait for it.
var errRestarting = errors.New("process restarting after an exit")

// process is one running child.
type process struct {
	gen   uint64
	cmd   *exec.Cmd
	stdin *os.File
	wmu   sync.Mutex

	pending pending
	pmu     sync.Mutex
	listens map[string]*listening // subscriptions/listen in flight, by request id

	started time.Time
	exited  chan struct{} // closed once stdout is drained and the child reaped
	// exit describes how the child ended; set before exited is closed.
	// Calls it leaves unanswered fail with it too, so whichever reaches
	// the health record first, the outage starts with the exit itself.
	exit *exitError

	said string // the latest line on stderr, under pmu
}

func (p *process) lastWords() string {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	return p.said
}

type listening struct {
	deliver func(*jsonrpc.Message)
	closed  chan struct{} // closed when the server answers the listen (graceful closure)
}

func newStdioConn(o Options, log *slog.Logger, onMsg OnMessage, h Health) (*stdioConn, error) {
	if _, err := exec.LookPath(o.Command[0]); err != nil {
		return nil, fmt.Errorf("command: %w", err)
	}
	c := &stdioConn{o: o, log: log, onMsg: onMsg, health: h}
	if o.PerPrincipal {
		c.kids = newChildren(c, cmp.Or(o.MaxChildren, maxChildren), cmp.Or(o.ChildIdle, childIdle))
		return c, nil
	}
	// A child that will not start or that exits is a failure of the
	// upstream's: the health record's summary logs the first and counts
	// the rest, so a crash loop costs a few lines, not a few per restart.
	c.sup = supervisor[*process]{
		open:  c.start,
		ended: func(p *process) <-chan struct{} { return p.exited },
		stop:  c.terminate,
		failed: func(_ uint64, err error) {
			c.health.Failure(fmt.Errorf("%w: %w", errNotStarted, err))
		},
		lost: func(p *process, _ time.Duration) { c.health.Failure(p.exit) },
		down: errRestarting,
	}
	c.sup.start()
	return c, nil
}

// exitError is a child's exit, which the supervisor answers with a restart.
type exitError struct {
	pid       int
	state     string
	ran       time.Duration
	lastWords string // its last line on stderr
}

func (e *exitError) Error() string {
	msg := fmt.Sprintf("process %d exited (%s) after %v; restarting", e.pid, e.state, e.ran.Round(time.Millisecond))
	if e.lastWords != "" {
		msg += fmt.Sprintf("; its last words: %q", e.lastWords)
	}
	return msg
}

func (e *exitError) Unwrap() error { return ErrProcessExited }

// errNotStarted: the child could not be started (its program cannot run).
var errNotStarted = errors.New("process failed to start")

// passedEnv are the variables of Manifold's environment a child gets
// what a program needs to find others, its home,
// its language and a scratch folder. Anything else may be a secret the
// configuration read as ${VAR}.
var passedEnv = []string{"PATH", "HOME", "LANG", "TMPDIR"}

// environment is a child's environment: o.Env over the passedEnv part of
// parent (KEY=VALUE). A later entry wins.
func environment(o Options, parent []string) []string {
	var env []string
	for _, kv := range parent {
		if k, _, _ := strings.Cut(kv, "="); slices.Contains(passedEnv, k) {
			env = append(env, kv)
		}
	}
	return append(env, o.Env...)
}

func (c *stdioConn) start(gen uint64) (*process, error) {
	cmd := exec.Command(c.o.Command[0], c.o.Command[1:]...)
	cmd.Dir = c.o.Dir
	cmd.Env = environment(c.o, os.Environ())
	// Its own process group, so a terminal's Ctrl-C reaches Manifold only,
	// and Manifold decides how its children stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, stdout, stderr, err := startPiped(cmd)
	if err != nil {
		return nil, err
	}
	p := &process{gen: gen, cmd: cmd, stdin: stdin, listens: map[string]*listening{}, started: time.Now(), exited: make(chan struct{})}
	if !c.health.Failing() {
		c.log.Info("upstream process started", "pid", cmd.Process.Pid, "generation", gen)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		c.readLoop(p, stdout)
	}()
	go c.logStderr(p, stderr)
	go func() {
		_ = cmd.Wait()
		// Let stdout drain what the child wrote before it died, then stop
		// reading even if someone else still holds the pipe.
		select {
		case <-readDone:
		case <-time.After(time.Second):
			_ = stdout.SetReadDeadline(time.Now())
			<-readDone
		}
		stdout.Close()
		stdin.Close()
		_ = stderr.SetReadDeadline(time.Now().Add(time.Second))
		p.exit = &exitError{pid: cmd.Process.Pid, state: cmd.ProcessState.String(), ran: time.Since(p.started), lastWords: p.lastWords()}
		p.pending.fail()
		close(p.exited)
	}()
	return p, nil
}

// startPiped starts cmd on pipes of our own rather than cmd's: their ends
// support deadlines (a child that stops reading stdin cannot block a caller
// forever), and stdout can be closed when the child has exited even if a
// grandchild still holds it open. It returns our ends.
func startPiped(cmd *exec.Cmd) (stdin, stdout, stderr *os.File, err error) {
	var theirs, ours []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	for i := 0; i < 3; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(theirs)
			closeAll(ours)
			return nil, nil, nil, err
		}
		if i == 0 { // stdin: the child reads
			theirs, ours = append(theirs, r), append(ours, w)
		} else {
			theirs, ours = append(theirs, w), append(ours, r)
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = theirs[0], theirs[1], theirs[2]
	err = cmd.Start()
	// The child has its copies; ours of its ends would keep the pipes open.
	closeAll(theirs)
	if err != nil {
		closeAll(ours)
		return nil, nil, nil, err
	}
	return ours[0], ours[1], ours[2], nil
}

// logStderr copies the child's stderr to the log, a line an entry, but
// while the upstream is failing: then a child in a crash loop would say the
// same at each restart, and its latest line goes with the summary instead.
func (c *stdioConn) logStderr(p *process, r io.Reader) {
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, err := readLine(br, 8<<10)
		if len(line) > 0 {
			p.pmu.Lock()
			p.said = string(line[:min(len(line), 512)])
			p.pmu.Unlock()
			if !c.health.Failing() {
				c.log.Info("upstream stderr", "line", string(line))
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line, truncating it at max bytes (the rest is
// discarded, not buffered).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if room := max - len(line); room > 0 {
			line = append(line, frag[:min(len(frag), room)]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

func (c *stdioConn) readLoop(p *process, stdout io.Reader) {
	limit := int(c.o.MaxResponseBytes)
	br := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, err := readLine(br, limit+1)
		if len(line) > limit {
			c.log.Warn("upstream message larger than max_response_bytes dropped", "limit", limit)
		} else if len(bytes.TrimSpace(line)) > 0 {
			c.dispatch(p, line)
		}
		if err != nil {
			return
		}
	}
}

func (c *stdioConn) dispatch(p *process, line []byte) {
	m, rpcErr := jsonrpc.Decode(line)
	if rpcErr != nil {
		c.log.Warn("upstream wrote a line that is not a JSON-RPC message", "err", rpcErr.Message)
		return
	}
	var l *listening
	if m.IsNotification() {
		// Looked up once: the listen may end (its caller leaving) at any
		// moment, and what was found must be what is delivered to.
		l = p.listenFor(m)
	}
	switch {
	case m.IsResponse():
		p.pending.answer(m)
		p.pmu.Lock()
		ended := p.listens[string(m.ID)]
		delete(p.listens, string(m.ID))
		p.pmu.Unlock()
		if ended != nil {
			close(ended.closed)
		}
	case l != nil:
		l.deliver(m)
	default:
		c.onMsg(context.Background(), p.gen, m, nil, func(answer *jsonrpc.Message, _ http.Header) {
			b, _ := json.Marshal(answer)
			_ = p.write(b)
		})
	}
}

// listenFor finds the subscription a tagged notification belongs to: on the
// shared channel the subscription id is the only way to tell.
func (p *process) listenFor(m *jsonrpc.Message) *listening {
	meta, _ := jsonrpc.Member(m.Params, "_meta") // read in place: every notification comes here
	sid, ok := jsonrpc.Member(meta, mcp.MetaSubscriptionID)
	if !ok {
		return nil
	}
	p.pmu.Lock()
	defer p.pmu.Unlock()
	return p.listens[string(sid)]
}

// stdinTimeout bounds one write to a child's stdin: a child that stops
// reading must not hold its callers (or the writers queued behind them).
const stdinTimeout = 10 * time.Second

func (p *process) write(b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.stdin.SetWriteDeadline(time.Now().Add(stdinTimeout))
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write to process: %w", err)
	}
	return nil
}

func (c *stdioConn) current() *process {
	p, _ := c.sup.current()
	return p
}

// on returns the live process of generation gen, and what to call once
// done with it; nil if gen's process is gone.
func (c *stdioConn) on(gen uint64) (*process, func()) {
	if c.kids != nil {
		return c.kids.hold(gen)
	}
	p := c.current()
	if p == nil || p.gen != gen {
		return nil, nil
	}
	return p, func() {}
}

// Ready waits for the process and returns its generation; run per
// principal, it starts a process for the negotiation of a principal's own
// session.
func (c *stdioConn) Ready(ctx context.Context) (uint64, error) {
	if c.kids != nil {
		return c.kids.open()
	}
	return c.sup.ready(ctx)
}

func (c *stdioConn) Scoped(bool) bool { return false }

func (c *stdioConn) Wire() string { return WireStdio }

// Busy counts the processes run per principal that have a call in flight
// past their negotiation: every one busy, the next principal waits.
func (c *stdioConn) Busy() int {
	if c.kids == nil {
		return 0
	}
	return c.kids.busy()
}

func (c *stdioConn) FallBack(context.Context, error) (uint64, bool, error) { return 0, false, nil }

// EndSession ends the principal's own process the session is on, if it
// has one (end).
func (c *stdioConn) EndSession(_ context.Context, s *Exchange) error {
	c.end(s.Gen)
	return nil
}

func (c *stdioConn) Alive(gen uint64) bool {
	if c.kids != nil {
		return c.kids.alive(gen)
	}
	return c.sup.alive(gen)
}

// end ends gen's process when it is a principal's own; the one shared
// process is the supervisor's to end.
func (c *stdioConn) end(gen uint64) {
	if c.kids != nil {
		c.kids.end(gen)
	}
}

func (c *stdioConn) Call(ctx context.Context, ex *Exchange) (*Reply, error) {
	p, release := c.on(ex.Gen)
	if p == nil {
		return nil, ErrSessionGone
	}
	defer release()
	b, err := json.Marshal(&ex.Msg)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	m, ok, err := p.pending.call(ctx, ex.Msg.ID, func() error { return p.write(b) }, func(cause error) { c.cancel(p, ex.Msg.ID, cause) })
	if err != nil {
		return nil, err
	}
	if !ok {
		<-p.exited
		return nil, p.exit
	}
	return &Reply{Message: m}, nil
}

// cancel tells the server the caller gave up, so it can stop working.
func (c *stdioConn) cancel(p *process, id json.RawMessage, cause error) {
	_ = p.write(cancelled(id, cause))
}

func (c *stdioConn) Send(_ context.Context, ex *Exchange) error {
	p, release := c.on(ex.Gen)
	if ex.Gen == 0 && c.kids == nil { // the one process, whichever it is
		p, release = c.current(), func() {}
	}
	if p == nil {
		return ErrSessionGone
	}
	defer release()
	b, err := json.Marshal(&ex.Msg)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	return p.write(b)
}

// Close stops the supervisor, which stops the child, and waits for it; when
// ctx ends first the child's process group is killed.
func (c *stdioConn) Close(ctx context.Context, _ string) error {
	if c.kids != nil {
		if err := c.kids.close(ctx); err != nil {
			return fmt.Errorf("stopping processes: %w", err)
		}
		return nil
	}
	err := c.sup.close(ctx, func(p *process) { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) })
	if err != nil {
		return fmt.Errorf("stopping process: %w", err)
	}
	return nil
}

// terminate stops a child the way the stdio transport asks: stdin closed,
// then SIGTERM, then SIGKILL, each after a grace period, to the child's whole
// process group.
func (c *stdioConn) terminate(p *process) {
	_ = p.stdin.Close()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		select {
		case <-p.exited:
			return
		case <-time.After(stopGrace):
		}
		c.log.Info("upstream process did not exit; signalling", "signal", sig.String())
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
	<-p.exited
}

// Listen runs a subscriptions/listen on the shared channel; it ends with
// notifications/cancelled when ctx does.
func (c *stdioConn) Listen(ctx context.Context, ex *Exchange, deliver func(*jsonrpc.Message)) error {
	p, release := c.on(ex.Gen)
	if p == nil {
		return ErrSessionGone
	}
	defer release()
	b, err := json.Marshal(&ex.Msg)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	l := &listening{deliver: deliver, closed: make(chan struct{})}
	key := string(ex.Msg.ID)
	p.pmu.Lock()
	p.listens[key] = l
	p.pmu.Unlock()
	defer func() {
		p.pmu.Lock()
		delete(p.listens, key)
		p.pmu.Unlock()
	}()
	if err := p.write(b); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		c.cancel(p, ex.Msg.ID, errors.New("subscription no longer needed"))
		return nil
	case <-l.closed:
		return ErrGracefulClose
	case <-p.exited:
		return SessionEnded(p.exit)
	}
}

// Stream waits for the process the session belongs to: its stdout is the
// legacy notification stream, already read by readLoop.
func (c *stdioConn) Stream(ctx context.Context, s *Exchange, opened func()) error {
	p, release := c.on(s.Gen)
	if p == nil {
		return ErrSessionGone
	}
	release() // a stream only waits: it keeps no process from going idle
	opened()
	select {
	case <-ctx.Done():
		return nil
	case <-p.exited:
		return SessionEnded(p.exit)
	}
}

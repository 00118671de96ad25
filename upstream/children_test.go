package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/manifold-mcp/manifold/upstream/transport"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// addKidTools gives the stdio child (childEnv=kid) a tool that elicits a
// username and answers with it, and one that works for arguments.ms
// milliseconds (or until cancelled).
func addKidTools(s *sdk.Server) {
	text := func(t string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: t}}}
	}
	s.AddTool(&sdk.Tool{Name: "ask", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		res, err := req.Session.Elicit(ctx, &sdk.ElicitParams{Message: "who?", RequestedSchema: map[string]any{"type": "object"}})
		if err != nil {
			return text("refused: " + err.Error()), nil
		}
		return text(fmt.Sprintf("got %v", res.Content["username"])), nil
	})
	s.AddTool(&sdk.Tool{Name: "wait", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		var args struct {
			MS int `json:"ms"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &args)
		select {
		case <-time.After(time.Duration(args.MS) * time.Millisecond):
			return text("waited"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
}

// kidUpstream is an upstream running this test binary as a stdio child
// (addKidTools) per principal, tagged so that kids can count its
// processes.
func kidUpstream(t *testing.T, o Options) (*Upstream, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("KID_TAG=%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	o.Command, o.Env, o.PerPrincipal = []string{exe, "-test.run=^$"}, []string{childEnv + "=kid", tag}, true
	o.Protocol = mcp.Version20251125
	t.Cleanup(func() { // after the upstream's Close, registered later
		if pids := kids(tag); len(pids) > 0 {
			t.Errorf("processes %v still running after Close", pids)
		}
	})
	return newUpstream(t, o), tag
}

// kids lists the processes this one started whose environment has tag.
func kids(tag string) []int {
	want := []byte("\x00" + tag + "\x00")
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(append([]byte("\x00"), env...), want) {
			out = append(out, pid)
		}
	}
	return out
}

// rssKB is the resident memory of pid, in kB.
func rssKB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// callTool calls the child's tool name with args, answering its
// questions with ask, and returns its text.
func callTool(ctx context.Context, u *Upstream, name, args string, ask mcp.Ask) (string, error) {
	resp, err := u.Call(ctx, &mcp.Request{Method: mcp.MethodToolsCall, Params: jsonrpc.Object{"name": jsonrpc.Quote(name), "arguments": json.RawMessage(args)}, Meta: jsonrpc.Object{}, Ask: ask}, How{})
	if err != nil {
		return "", err
	}
	if resp.Error != nil {
		return "", resp.Error
	}
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(resp.Result, &r); err != nil || len(r.Content) == 0 {
		return "", fmt.Errorf("result %s: %v", resp.Result, err)
	}
	return r.Content[0].Text, nil
}

// answering is an Ask that accepts with username.
func answering(username string) mcp.Ask {
	return func(context.Context, *jsonrpc.Message) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprintf(`{"action":"accept","content":{"username":%q}}`, username)), nil
	}
}

// Principals asking at once each get their own process, so each question
// is put to its own caller; within one principal, a question while two of
// its calls are in flight is refused, naming no key to set.
func TestChildQuestionsArePrincipals(t *testing.T) {
	u, tag := kidUpstream(t, Options{Options: transport.Options{Timeout: 20 * time.Second}})
	users := []string{"alice", "bob", "carol", "dave"}
	var wg sync.WaitGroup
	for _, who := range users {
		wg.Go(func() {
			for range 5 {
				got, err := callTool(asPrincipal(who), u, "ask", `{}`, answering(who))
				if err != nil || got != "got "+who {
					t.Errorf("%s's question answered %q, %v", who, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := len(kids(tag)); n != len(users) {
		t.Errorf("%d processes for %d principals", n, len(users))
	}
	// Alice works and asks at once: her question cannot be told apart.
	busy := make(chan error, 1)
	go func() {
		_, err := callTool(asPrincipal("alice"), u, "wait", `{"ms":1500}`, nil)
		busy <- err
	}()
	time.Sleep(300 * time.Millisecond) // the wait is under way (it lasts 1.5 s)
	got, err := callTool(asPrincipal("alice"), u, "ask", `{}`, answering("alice"))
	if err != nil || !strings.Contains(got, "no caller it can be attributed to") || strings.Contains(got, "per_principal") {
		t.Errorf("alice's question beside her other call answered %q, %v", got, err)
	}
	if err := <-busy; err != nil {
		t.Errorf("alice's wait: %v", err)
	}
}

// The processes are bounded: many principals in turn never have more
// than MaxChildren running, the least recently used idle one ending for
// the next; memory does not grow with the principals. When every process
// has a call in flight, a principal without one is refused, clearly, and
// served once one is free.
func TestChildrenAreBounded(t *testing.T) {
	const bound, principals = 3, 18
	u, tag := kidUpstream(t, Options{Options: transport.Options{MaxChildren: bound, Timeout: 20 * time.Second}})
	var most atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // the process table, sampled while principals come and go
		defer close(sampled)
		for {
			most.Store(max(most.Load(), int64(len(kids(tag)))))
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	pids := map[string]string{}
	read := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			who := fmt.Sprintf("user-%d", i)
			pid, err := readPID(asPrincipal(who), u)
			if err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			for other, p := range pids {
				if p == pid && other != who {
					t.Fatalf("%s served by %s's process %s", who, other, pid)
				}
			}
			pids[who] = pid
		}
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	rss := func() (kb int) {
		for _, pid := range kids(tag) {
			kb += rssKB(pid)
		}
		return kb
	}
	read(0, bound)
	heapBefore, rssBefore := heap(), rss()
	read(bound, principals)
	heapAfter, rssAfter := heap(), rss()
	close(stop)
	<-sampled
	t.Logf("heap %d → %d bytes, children's RSS %d → %d kB, over %d more principals; at most %d processes at once",
		heapBefore, heapAfter, rssBefore, rssAfter, principals-bound, most.Load())
	if most.Load() > bound {
		t.Errorf("%d processes at once, bound %d", most.Load(), bound)
	}
	if heapAfter > heapBefore+2<<20 {
		t.Errorf("heap grew %d bytes over %d more principals", heapAfter-heapBefore, principals-bound)
	}
	last := fmt.Sprintf("user-%d", principals-1)
	if pid, err := readPID(asPrincipal(last), u); err != nil || pid != pids[last] {
		t.Errorf("the latest principal again: process %s (%v), was %s", pid, err, pids[last])
	}

	// Every process has a call in flight, past its negotiation.
	var working sync.WaitGroup
	for i := range bound {
		working.Go(func() {
			if got, err := callTool(asPrincipal(fmt.Sprintf("worker-%d", i)), u, "wait", `{"ms":4000}`, nil); err != nil || got != "waited" {
				t.Errorf("worker-%d: %q, %v", i, got, err)
			}
		})
	}
	eventually(t, 20*time.Second, "every process working", func() bool {
		return u.conn.(interface{ Busy() int }).Busy() == bound
	})
	_, err := readPID(asPrincipal("latecomer"), u)
	if !errors.Is(err, transport.ErrChildrenBusy) || !strings.Contains(err.Error(), fmt.Sprint(bound)) {
		t.Errorf("a principal past the bound, every process working: %v", err)
	}
	working.Wait()
	if _, err := readPID(asPrincipal("latecomer"), u); err != nil {
		t.Errorf("the latecomer once a process is free: %v", err)
	}
	if n := len(kids(tag)); n > bound {
		t.Errorf("%d processes, bound %d", n, bound)
	}
}

// A process with no call for ChildIdle ends; its principal's next call
// starts another. One in use is not ended however long its call.
func TestChildrenEndWhenIdle(t *testing.T) {
	u, tag := kidUpstream(t, Options{Options: transport.Options{ChildIdle: 300 * time.Millisecond}})
	first, err := readPID(asPrincipal("alice"), u)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the idle process ended", func() bool { return len(kids(tag)) == 0 })
	second, err := readPID(asPrincipal("alice"), u)
	if err != nil || second == first {
		t.Fatalf("alice after her process ended: %s (%v), was %s", second, err, first)
	}
	if got, err := callTool(asPrincipal("alice"), u, "wait", `{"ms":1200}`, nil); err != nil || got != "waited" {
		t.Errorf("a call longer than the idle time: %q, %v", got, err)
	}
	if third, err := readPID(asPrincipal("alice"), u); err != nil || third != second {
		t.Errorf("alice's process after a long call: %s (%v), was %s", third, err, second)
	}
}

// A fault sequence: alice's process crashes with her call in it (the call
// fails as unreachable) while bob's call goes on and is answered; alice's
// next call starts a process of hers again; it crashes again, and
// recovers again. Bob keeps his one process throughout.
func TestChildCrashIsItsPrincipalsAlone(t *testing.T) {
	u, _ := kidUpstream(t, Options{})
	bobs, err := readPID(asPrincipal("bob"), u)
	if err != nil {
		t.Fatal(err)
	}
	alices, err := readPID(asPrincipal("alice"), u)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		bob := make(chan error, 1)
		go func() {
			got, err := callTool(asPrincipal("bob"), u, "wait", `{"ms":800}`, nil)
			if err == nil && got != "waited" {
				err = fmt.Errorf("answered %q", got)
			}
			bob <- err
		}()
		alice := make(chan error, 1)
		go func() {
			_, err := callTool(asPrincipal("alice"), u, "wait", `{"ms":60000}`, nil)
			alice <- err
		}()
		time.Sleep(200 * time.Millisecond) // both calls under way
		kill(t, alices)
		if err := <-alice; err == nil || !Unreachable(err) {
			t.Errorf("round %d: alice's call in her crashed process: %v, want unreachable", round, err)
		}
		if err := <-bob; err != nil {
			t.Errorf("round %d: bob's call beside alice's crash: %v", round, err)
		}
		again, err := readPID(asPrincipal("alice"), u)
		if err != nil || again == alices {
			t.Fatalf("round %d: alice after her crash: %s (%v), was %s", round, again, err, alices)
		}
		alices = again
		if pid, err := readPID(asPrincipal("bob"), u); err != nil || pid != bobs {
			t.Errorf("round %d: bob's process %s (%v), was %s", round, pid, err, bobs)
		}
	}
}

// Close ends every process and returns once they are gone.
func TestChildrenEndAtClose(t *testing.T) {
	u, tag := kidUpstream(t, Options{})
	var pids []string
	for _, who := range []string{"alice", "bob", "carol"} {
		pid, err := readPID(asPrincipal(who), u)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	if n := len(slices.Compact(pids)); n != 3 {
		t.Fatalf("three principals, %d processes", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := u.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := kids(tag); len(left) != 0 {
		t.Errorf("processes %v running after Close returned", left)
	}
	if _, err := readPID(asPrincipal("dave"), u); err == nil {
		t.Error("a closed upstream started a process")
	}
}

// A principal's process answers for its principal alone: its reads are
// private, whatever scope stands in for the hints a legacy server does not
// send.
func TestChildAnswersArePrivate(t *testing.T) {
	u, _ := kidUpstream(t, Options{DefaultScope: mcp.ScopePublic})
	resp, err := u.Call(asPrincipal("alice"), &mcp.Request{Method: mcp.MethodResourcesRead, Params: jsonrpc.Object{"uri": jsonrpc.Quote("test://pid")}, Meta: jsonrpc.Object{}}, How{})
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		CacheScope string `json:"cacheScope"`
	}
	if err := json.Unmarshal(resp.Result, &r); err != nil || r.CacheScope != mcp.ScopePrivate {
		t.Errorf("read answered %s (%v), want it private", resp.Result, err)
	}
}

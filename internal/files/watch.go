package files

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io/fs"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// watcher delivers change notifications by polling: a watched file whose
// size or modification time changed is "updated", and a change in the set of
// listed names is "list_changed". Modern subscribers (subscriptions/listen)
// get notifications tagged with their subscription id; legacy ones (after
// resources/subscribe) get them untagged.
type watcher struct {
	s *Server

	mu         sync.Mutex
	listens    map[string]*listen // by subscription id (the listen request id)
	legacySubs map[string]bool    // URIs subscribed with resources/subscribe
	session    bool               // a legacy client initialized: it gets list_changed
	stamps     map[string]stamp   // last seen state of each watched URI
	names      [32]byte           // digest of the listed names
}

type listen struct {
	id          json.RawMessage
	listChanged bool
	uris        map[string]bool
}

type stamp struct {
	size int64
	mod  time.Time
	ok   bool
}

func newWatcher(s *Server) *watcher {
	return &watcher{s: s, listens: map[string]*listen{}, legacySubs: map[string]bool{}, stamps: map[string]stamp{}}
}

// listen acknowledges a subscriptions/listen request and registers it. The
// request is never answered: the subscription ends when the client sends
// notifications/cancelled for it, or when the channel closes.
func (w *watcher) listen(_ context.Context, req *request) {
	var p struct {
		Notifications mcp.SubscriptionFilter `json:"notifications"`
	}
	if raw, ok := req.params["notifications"]; ok {
		if err := json.Unmarshal(raw, &p.Notifications); err != nil {
			w.s.fail(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid notifications filter"))
			return
		}
	}
	l := &listen{id: req.id, listChanged: p.Notifications.ResourcesListChanged, uris: map[string]bool{}}
	honoured := mcp.SubscriptionFilter{ResourcesListChanged: l.listChanged}
	for _, uri := range p.Notifications.ResourceSubscriptions {
		if _, ok := resolve(uri); ok {
			l.uris[uri] = true
			honoured.ResourceSubscriptions = append(honoured.ResourceSubscriptions, uri)
		}
	}
	w.mu.Lock()
	w.listens[string(req.id)] = l
	for uri := range l.uris {
		w.watchLocked(uri)
	}
	if l.listChanged && w.names == ([32]byte{}) {
		w.names = w.s.listDigest()
	}
	// The ack goes out under the lock, so no notification for this
	// subscription can overtake it.
	w.send(mcp.NotifyAcknowledged, l.id, map[string]any{"notifications": honoured})
	w.mu.Unlock()
}

func (w *watcher) legacy(req *request) *jsonrpc.Error {
	uri := req.params.String("uri")
	if _, ok := resolve(uri); !ok {
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "resource not found").WithData(mcp.NotFoundData{URI: uri})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if req.method == mcp.MethodSubscribe {
		w.legacySubs[uri] = true
		w.watchLocked(uri)
	} else {
		delete(w.legacySubs, uri)
	}
	return nil
}

// initialized records a legacy session, which is owed list_changed.
func (w *watcher) initialized() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.session {
		w.session = true
		w.names = w.s.listDigest()
	}
}

func (w *watcher) cancel(id json.RawMessage) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.listens, string(id))
}

func (w *watcher) watchLocked(uri string) {
	if _, ok := w.stamps[uri]; !ok {
		w.stamps[uri] = w.s.stat(uri)
	}
}

func (s *Server) stat(uri string) stamp {
	rel, ok := resolve(uri)
	if !ok {
		return stamp{}
	}
	info, err := s.root.Stat(rel)
	if err != nil || !info.Mode().IsRegular() {
		return stamp{}
	}
	return stamp{size: info.Size(), mod: info.ModTime(), ok: true}
}

// listDigest summarises the names a listing would return.
func (s *Server) listDigest() [32]byte {
	h := sha256.New()
	_ = s.eachFile(func(p string, _ fs.DirEntry) error {
		h.Write([]byte(p + "\x00"))
		return nil
	})
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

func (w *watcher) run(ctx context.Context) {
	t := time.NewTicker(w.s.o.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.poll()
		}
	}
}

func (w *watcher) poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	wanted := map[string]bool{}
	wantList := false
	for _, l := range w.listens {
		for uri := range l.uris {
			wanted[uri] = true
		}
		wantList = wantList || l.listChanged
	}
	for uri := range w.legacySubs {
		wanted[uri] = true
	}
	wantList = wantList || w.session
	for uri, old := range w.stamps {
		if !wanted[uri] {
			delete(w.stamps, uri)
			continue
		}
		now := w.s.stat(uri)
		if now == old {
			continue
		}
		w.stamps[uri] = now
		params := map[string]any{"uri": uri}
		if w.legacySubs[uri] {
			w.send(mcp.NotifyResourceUpdated, nil, params)
		}
		for _, l := range w.listens {
			if l.uris[uri] {
				w.send(mcp.NotifyResourceUpdated, l.id, params)
			}
		}
	}
	if !wantList {
		w.names = [32]byte{}
		return
	}
	if d := w.s.listDigest(); d != w.names {
		w.names = d
		if w.session {
			w.send(mcp.NotifyResourcesChanged, nil, map[string]any{})
		}
		for _, l := range w.listens {
			if l.listChanged {
				w.send(mcp.NotifyResourcesChanged, l.id, map[string]any{})
			}
		}
	}
}

// send writes a notification, tagged with subscription id sid when given.
func (w *watcher) send(method string, sid json.RawMessage, params map[string]any) {
	if sid != nil {
		params["_meta"] = map[string]json.RawMessage{mcp.MetaSubscriptionID: sid}
	}
	b, err := jsonrpc.Notification(method, params)
	if err == nil {
		w.s.write(b)
	}
}

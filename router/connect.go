package router

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/namespace"
	"github.com/manifold-mcp/manifold/upstream"
)

// The connect tool. An upstream reached with each caller's own OAuth grant
// cannot list its tools for a caller who has not given one: that caller's
// list shows one tool in their place, {upstream}_connect, which hosts call
// as they call any listed tool. Its call asks the consent as any call of
// the upstream does (Handle), and once given, says so; the hub then tells
// the caller's streams that the lists changed (process wiring).

const connectTool = "connect"

// connectName is the connect tool of upstream, in every namespace mode:
// without prefixes a bare "connect" would name no upstream.
func connectName(upstream string) string { return upstream + namespace.NameSeparator + connectTool }

// connectPage is u's tools/list page, in the merged view, for a caller who
// must consent first: private to the caller, and stale at once.
func connectPage(u *upstream.Upstream) (json.RawMessage, error) {
	tool := map[string]any{
		"name":        connectName(u.Name()),
		"title":       "Connect " + u.Name(),
		"description": u.ConnectDescription(),
		"inputSchema": map[string]string{"type": "object"},
	}
	return json.Marshal(map[string]any{"tools": []any{tool}, "ttlMs": 0, "cacheScope": mcp.ScopePrivate})
}

// toolsList is the method table's row of tools/list.
var toolsList, _ = mcp.Lookup(mcp.MethodToolsList)

// connectOf is the upstream whose connect tool name is, nil if none.
func connectOf(set *upstream.Set, name string) *upstream.Upstream {
	up, ok := strings.CutSuffix(name, namespace.NameSeparator+connectTool)
	if !ok {
		return nil
	}
	if u := set.Get(up); u != nil && u.AsksConsent() {
		return u
	}
	return nil
}

// connect serves a call of u's connect tool, name: the caller's list of
// u's tools, which fails with the consent to ask when the caller has
// none, then a result saying the account is connected. own is true when
// u lists a tool of that name itself, whose call it is to serve.
func (r *Router) connect(ctx context.Context, u *upstream.Upstream, name string, n *Note) (res json.RawMessage, own bool, err error) {
	h := hop{u: u, m: toolsList, req: &mcp.Request{Method: mcp.MethodToolsList, Params: jsonrpc.Object{}, Meta: jsonrpc.Object{}}, note: n}
	page, err := r.fetch(ctx, h)
	err = r.callerError(h, err)
	if err != nil {
		return nil, false, err
	}
	var listed struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	_ = json.Unmarshal(page, &listed)
	for _, t := range listed.Tools {
		if t.Name == name {
			return nil, true, nil
		}
	}
	text := fmt.Sprintf("Your %s account is connected: Manifold may now use %s on your behalf. List the tools again to see its tools.", u.Name(), u.Name())
	b, _ := json.Marshal(map[string]any{"content": []any{map[string]string{"type": "text", "text": text}}, "isError": false})
	res, err = r.decorate(b, false, namespace.ItemsRewrite{})
	return res, false, err
}

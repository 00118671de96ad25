package upstream

import (
	"context"
	"slices"

	"github.com/manifold-mcp/manifold/internal/glob"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// View is what one curated endpoint serves of the upstreams: some of them,
// and of their tools, prompts and resources those its globs select, in the
// names and URIs the endpoint lists them by (namespaced). A request served
// at an endpoint carries its View in its context (WithView); the router
// and the hub take the set of upstreams through it (Set.In), so an
// endpoint's lists, reads, calls and subscriptions see only the view, and
// what is outside it answers as what does not exist. A View is immutable.
type View struct {
	// Path is the endpoint's HTTP path; it names the view in metrics, the
	// audit log and pagination cursors.
	Path string
	// Upstreams names the upstreams the view holds; nil holds them all.
	Upstreams []string
	// Tools, Prompts and Resources select by namespaced name (tools,
	// prompts) or namespaced URI (resources, templates by their text,
	// reads, completion refs).
	Tools, Prompts, Resources glob.Set
	// Access admits only principals one of whose rules matches; to the
	// others the endpoint does not exist. None admits everyone.
	Access []AccessRule
	// Search lists find_tools and call_tool in place of the view's tools
	// (endpoints[].catalog: search; router/catalog.go).
	Search bool
}

// MainPath names the view of the main endpoint, which serves everything:
// the nil View.
const MainPath = "/mcp"

// Name is the view's path, MainPath for the nil View.
func (v *View) Name() string {
	if v == nil {
		return MainPath
	}
	return v.Path
}

// Searches reports whether the view lists its tools through a search.
func (v *View) Searches() bool { return v != nil && v.Search }

// Holds reports whether the view holds the upstream called name.
func (v *View) Holds(name string) bool {
	return v == nil || v.Upstreams == nil || slices.Contains(v.Upstreams, name)
}

// Shows reports whether the view shows the item id (a namespaced name or
// URI) of the list method list (tools/list, prompts/list, resources/list,
// resources/templates/list) or of a method that names one (resources/read).
func (v *View) Shows(list, id string) bool {
	g := v.globs(list)
	if g == nil || !g.Admits(id) {
		return g == nil
	}
	if g != &v.Resources {
		return true
	}
	// A URI is read and watched upstream in its normalized form: a
	// spelling the globs admit of a resource they do not (percent-encoded
	// letters, dot segments) shows nothing more.
	n := mcp.NormalizeURI(id)
	return n == id || g.Admits(n)
}

// Filters reports whether the view leaves out some items of list.
func (v *View) Filters(list string) bool {
	g := v.globs(list)
	return g != nil && !g.Empty()
}

func (v *View) globs(list string) *glob.Set {
	if v == nil {
		return nil
	}
	switch list {
	case mcp.MethodToolsList, mcp.MethodToolsCall:
		return &v.Tools
	case mcp.MethodPromptsList, mcp.MethodPromptsGet:
		return &v.Prompts
	case mcp.MethodResourcesList, mcp.MethodTemplatesList, mcp.MethodResourcesRead:
		return &v.Resources
	}
	return nil
}

// Admits reports whether a principal with claims may use the endpoint.
func (v *View) Admits(claims map[string][]string) bool {
	return v == nil || admits(v.Access, claims)
}

type viewKey struct{}

// WithView returns ctx serving v (nil: the main endpoint).
func WithView(ctx context.Context, v *View) context.Context {
	return context.WithValue(ctx, viewKey{}, v)
}

// ViewOf returns the view ctx serves, nil for the main endpoint.
func ViewOf(ctx context.Context) *View {
	v, _ := ctx.Value(viewKey{}).(*View)
	return v
}

// viewMemo keys a configured set's narrowing to one view in its memo.
type viewMemo struct{ v *View }

// In returns the upstreams of s that v holds, in order, as a set that
// knows v (View): s itself for the nil view. Take it of the configured set
// and then For the caller's claims. Views share the configured set's memo,
// like For's.
func (s *Set) In(v *View) *Set {
	if v == nil || s.view == v {
		return s
	}
	if s != s.root {
		return s.narrow(v)
	}
	return s.Memo(viewMemo{v}, func(root *Set) any { return root.narrow(v) }).(*Set)
}

func (s *Set) narrow(v *View) *Set {
	var ups []*Upstream
	for _, u := range s.all {
		if v.Holds(u.Name()) {
			ups = append(ups, u)
		}
	}
	n := newSet(ups)
	n.root, n.memo, n.view = s.root, s.memo, v
	return n
}

// View returns the view the set was narrowed to (In), nil for the main
// endpoint's.
func (s *Set) View() *View { return s.view }

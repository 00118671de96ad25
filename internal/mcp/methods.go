package mcp

// The method table: one row per MCP method Manifold serves, read by every
// layer that must treat methods differently. The router routes by it, merge
// and namespace find a list's items with it, the cache decides what to store
// and how to tag it, the upstream client decides what may be retried, and the
// frontends decide which header mirrors which param. Serving a new method is
// a new row here plus whatever about it is truly new.

// Route says where a method's requests go.
type Route int

const (
	// RouteLocal: Manifold answers itself.
	RouteLocal Route = iota + 1
	// RouteAll: every upstream, one page of each per downstream page,
	// merged in configuration order.
	RouteAll
	// RouteURI: the one upstream that serves params.uri.
	RouteURI
	// RouteName: the one upstream that serves params.name, a name in the
	// list Method.Names.
	RouteName
	// RouteRef: the one upstream that serves params.ref (a prompt by name,
	// a resource or template by URI).
	RouteRef
	// RouteStream: a subscription; the answer is a stream of events from
	// every upstream.
	RouteStream
)

// Method is one row of the table.
type Method struct {
	Name  string
	Route Route
	// Items names the result member holding the items of a list (or the
	// contents of a read), and ID the member that identifies each item: the
	// one a namespace rewrites and a merge keeps unique.
	Items, ID string
	// Tag is the invalidation tag of the method's cached answers; TagURI
	// means each answer is tagged with its own resource URI.
	Tag string
	// Cacheable results may carry the cache hints ttlMs and cacheScope
	// (SEP-2549) and may be stored.
	Cacheable bool
	// Retry: the request is idempotent and may be sent again after a
	// connection error.
	Retry bool
	// NameParam is the params member that the Mcp-Name header mirrors.
	NameParam string
	// Names is, for RouteName, the list method whose items it names.
	Names string
	// Blocks is the path, through objects and arrays, to the content blocks
	// of a result, whose resource links and embedded resources carry URIs.
	Blocks []string
	// Long: it runs work of unknown length (a tool), bounded by the
	// upstream's call timeout rather than its read timeout.
	Long bool
}

// Cache tags: what one notification invalidates together.
const (
	// TagURI stands for the resource URI of the request.
	TagURI           = "uri"
	TagDiscover      = "discover"
	TagResourceLists = "lists:resources" // resources/list and resources/templates/list
	TagToolLists     = "lists:tools"
	TagPromptLists   = "lists:prompts"
	// TagToolResults tags an upstream's cached tool results (which only
	// an operator's policy stores): they go with its tools list.
	TagToolResults = "results:tools"
)

var methods = map[string]*Method{}

func init() {
	for _, m := range []*Method{
		{Name: MethodDiscover, Route: RouteLocal, Tag: TagDiscover, Cacheable: true, Retry: true},
		{Name: MethodResourcesList, Route: RouteAll, Items: "resources", ID: "uri", Tag: TagResourceLists, Cacheable: true, Retry: true},
		{Name: MethodTemplatesList, Route: RouteAll, Items: "resourceTemplates", ID: "uriTemplate", Tag: TagResourceLists, Cacheable: true, Retry: true},
		{Name: MethodResourcesRead, Route: RouteURI, Items: "contents", ID: "uri", Tag: TagURI, Cacheable: true, Retry: true, NameParam: "uri"},
		{Name: MethodSubscriptions, Route: RouteStream},
		{Name: MethodToolsList, Route: RouteAll, Items: "tools", ID: "name", Tag: TagToolLists, Cacheable: true, Retry: true},
		{Name: MethodPromptsList, Route: RouteAll, Items: "prompts", ID: "name", Tag: TagPromptLists, Cacheable: true, Retry: true},
		{Name: MethodToolsCall, Route: RouteName, Tag: TagToolResults, NameParam: "name", Names: MethodToolsList, Blocks: []string{"content"}, Long: true},
		{Name: MethodPromptsGet, Route: RouteName, NameParam: "name", Names: MethodPromptsList, Blocks: []string{"messages", "content"}},
		{Name: MethodComplete, Route: RouteRef},
	} {
		methods[m.Name] = m
	}
}

// Lookup returns the row of a method Manifold serves.
func Lookup(name string) (*Method, bool) {
	m, ok := methods[name]
	return m, ok
}

// Names lists the methods of the table, in no particular order.
func Names() []string {
	names := make([]string, 0, len(methods))
	for name := range methods {
		names = append(names, name)
	}
	return names
}

// Cacheable reports whether results of method may carry cache hints and be
// stored.
func Cacheable(method string) bool {
	m, ok := methods[method]
	return ok && m.Cacheable
}

// ListChange is a notification an upstream sends when one of its lists
// changed: which cached answers it invalidates, which member of a listen
// filter asks for it, and which capability promises it.
type ListChange struct {
	Notification string
	// List is the method whose answers changed; Manifold honours a filter
	// for it only when it serves that method.
	List string
	Tag  string
	// Results, if set, tags the cached answers computed from the list's
	// items (tool results), which its change invalidates too.
	Results string
	// Wanted points at the filter member that asks for this notification.
	Wanted func(*SubscriptionFilter) *bool
	// Declared reports whether a server's capabilities promise it.
	Declared func(Capabilities) bool
	// Served reports whether a server's capabilities say it serves the
	// list at all.
	Served func(Capabilities) bool
}

// ListChanges are the list notifications of 2026-07-28 (and, untagged, of
// the legacy revisions).
var ListChanges = []*ListChange{
	{
		Notification: NotifyResourcesChanged, List: MethodResourcesList, Tag: TagResourceLists,
		Wanted:   func(f *SubscriptionFilter) *bool { return &f.ResourcesListChanged },
		Declared: func(c Capabilities) bool { return c.Resources != nil && c.Resources.ListChanged },
		Served:   func(c Capabilities) bool { return c.Resources != nil },
	},
	{
		Notification: NotifyToolsChanged, List: MethodToolsList, Tag: TagToolLists, Results: TagToolResults,
		Wanted:   func(f *SubscriptionFilter) *bool { return &f.ToolsListChanged },
		Declared: func(c Capabilities) bool { return c.Tools != nil && c.Tools.ListChanged },
		Served:   func(c Capabilities) bool { return c.Tools != nil },
	},
	{
		Notification: NotifyPromptsChanged, List: MethodPromptsList, Tag: TagPromptLists,
		Wanted:   func(f *SubscriptionFilter) *bool { return &f.PromptsListChanged },
		Declared: func(c Capabilities) bool { return c.Prompts != nil && c.Prompts.ListChanged },
		Served:   func(c Capabilities) bool { return c.Prompts != nil },
	},
}

// ListChangeOf returns the row of a list-changed notification.
func ListChangeOf(notification string) (*ListChange, bool) {
	for _, lc := range ListChanges {
		if lc.Notification == notification {
			return lc, true
		}
	}
	return nil, false
}

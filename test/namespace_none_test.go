package test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// uncachedServer is a modern go-sdk server named name whose every answer
// says ttlMs 0: nothing of it may be kept, so a list shows what it lists
// now.
func uncachedServer(name string, pageSize int) *mcp.Server {
	return mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ServerOptions{
		PageSize: pageSize,
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.TTLMs, c.CacheScope = 0, "public"
		},
	})
}

// addText adds a resource whose text is text.
func addText(s *mcp.Server, uri, text string) {
	s.AddResource(&mcp.Resource{URI: uri, Name: uri, MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: text}}}, nil
		})
}

// count is how many times s is in list.
func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// Without namespaces, a resource (and a tool) removed from upstream ua and
// added to ub, both saying nothing is cacheable, is listed, once, by the
// next merged list, and served by ub: a list whose upstreams say nothing
// cacheable shows what they list now.
func TestNoNamespaceRelearnsAMove(t *testing.T) {
	sa, sb := uncachedServer("ua", 0), uncachedServer("ub", 0)
	addText(sa, "test://moving", "moving from ua")
	addText(sa, "test://stay-a", "stays in ua")
	addText(sb, "test://stay-b", "stays in ub")
	tool := func(s *mcp.Server, who string) {
		s.AddTool(&mcp.Tool{Name: "mover", InputSchema: objectSchema(`{}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return textResult("mover in " + who), nil
		})
	}
	tool(sa, "ua")
	ua, ub := modernSDK(t, sa), modernSDK(t, sb)
	p := startProxy(t, "namespace: none\nupstreams:"+httpUpstreamYAML("ua", ua.URL)+httpUpstreamYAML("ub", ub.URL))
	if got := uris(listAll(t, p.URL, "resources/list")); count(got, "test://moving") != 1 {
		t.Fatalf("before the move: %v", got)
	}
	if got := names(listAll(t, p.URL, "tools/list"), "tools"); count(got, "mover") != 1 || toolText(t, p.URL, "mover", `{}`) != "mover in ua" {
		t.Fatalf("before the move: tools %v", got)
	}

	sa.RemoveResources("test://moving")
	sa.RemoveTools("mover")
	addText(sb, "test://moving", "moving from ub")
	tool(sb, "ub")
	eventually(t, 3*time.Second, func() error {
		res := uris(listAll(t, p.URL, "resources/list"))
		tools := names(listAll(t, p.URL, "tools/list"), "tools")
		if count(res, "test://moving") == 1 && count(tools, "mover") == 1 {
			return nil
		}
		return fmt.Errorf("after the move, the merged lists are resources %v, tools %v: want test://moving and mover once each", res, tools)
	})
	if got := readText(t, p.URL, "test://moving"); got != "moving from ub" {
		t.Errorf("the moved resource reads %q", got)
	}
	if got := toolText(t, p.URL, "mover", `{}`); got != "mover in ub" {
		t.Errorf("the moved tool answers %q", got)
	}
}

// Without namespaces, a resource and a template two upstreams list are
// listed once, and a read of either is routed to their owner, the first in
// configuration order, whichever lists it first. That holds across the
// pages of a merged list (the first upstream's copy on its second page,
// the second's on its first), from the very first listing on.
func TestNoNamespaceListsASharedIdentityOnce(t *testing.T) {
	sa, sb := uncachedServer("ua", 2), uncachedServer("ub", 2)
	for _, uri := range []string{"test://a/0", "test://a/1", "test://a/2", "test://shared"} {
		addText(sa, uri, "from ua")
	}
	addText(sb, "test://shared", "from ub")
	template := func(s *mcp.Server, who string, others ...string) {
		for _, o := range others {
			s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: o, Name: o}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			})
		}
		s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://items/{id}", Name: "items"}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "item from " + who}}}, nil
		})
	}
	template(sa, "ua", "test://a/t0/{x}", "test://a/t1/{x}")
	template(sb, "ub")
	ua, ub := modernSDK(t, sa), modernSDK(t, sb)
	p := startProxy(t, "namespace: none\nupstreams:"+httpUpstreamYAML("ua", ua.URL)+httpUpstreamYAML("ub", ub.URL))
	for round := 0; round < 3; round++ {
		resPages, tmplPages := listAll(t, p.URL, "resources/list"), listAll(t, p.URL, "resources/templates/list")
		res := uris(resPages)
		for _, page := range resPages {
			if inPage := uris([]listResult{page}); count(inPage, "test://shared") > 1 {
				t.Errorf("listing %d: test://shared twice in one merged page: %v", round, inPage)
			}
		}
		var tmpls []string
		for _, page := range tmplPages {
			var inPage []string
			for _, tm := range page.ResourceTemplates {
				inPage = append(inPage, tm["uriTemplate"].(string))
			}
			if count(inPage, "test://items/{id}") > 1 {
				t.Errorf("listing %d: test://items/{id} twice in one merged page: %v", round, inPage)
			}
			tmpls = append(tmpls, inPage...)
		}
		if count(res, "test://shared") != 1 || count(tmpls, "test://items/{id}") != 1 {
			t.Errorf("listing %d: test://shared listed %d times in %v, test://items/{id} %d times in %v", round, count(res, "test://shared"), res, count(tmpls, "test://items/{id}"), tmpls)
		}
		if want := []string{"test://a/0", "test://a/1", "test://a/2", "test://shared"}; !slices.Equal(res, want) {
			t.Errorf("listing %d: %v, want %v", round, res, want)
		}
		if got := readText(t, p.URL, "test://shared"); got != "from ua" {
			t.Errorf("listing %d: test://shared reads %q, want its owner ua's", round, got)
		}
		if got := readText(t, p.URL, "test://items/7"); got != "item from ua" {
			t.Errorf("listing %d: test://items/7 reads %q, want its owner ua's", round, got)
		}
	}
}

package process

import (
	"fmt"
	"html/template"
	"net/http"
	"strings"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/router/frontend"
)

// rootPage is GET / on the main listener: what a newcomer who opens the
// address in a browser (or curls it) learns of where MCP is served. It
// names no upstream, and no endpoint that has access rules: it is open to
// callers without credentials, as the resource metadata is.
func (p *Process) rootPage(mux *http.ServeMux) {
	paths := p.mcpPaths()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if strings.Contains(r.Header.Get("Accept"), "text/html") {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_ = rootHTML.Execute(w, rootData{Version: mcp.BuildVersion, Paths: paths})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "Manifold %s: one MCP endpoint in front of many MCP servers.\n\n", mcp.BuildVersion)
		for _, mp := range paths {
			fmt.Fprintf(w, "%-36s %s\n", mp.Path, mp.What)
		}
	})
	mux.Handle("GET /{$}", frontend.Chain(page, frontend.Recover(p.log),
		frontend.CheckHost(p.cfg.AllowedHosts), frontend.CheckOrigin(p.cfg.AllowedOrigins)))
}

type mcpPath struct{ Path, What string }

type rootData struct {
	Version string
	Paths   []mcpPath
}

// mcpPaths are the MCP paths anyone may be told of: /mcp, and the curated
// endpoints without access rules, each with its HTTP+SSE pair.
func (p *Process) mcpPaths() []mcpPath {
	out := []mcpPath{{"/mcp", "MCP, Streamable HTTP (2026-07-28 and 2025 sessions)"},
		{frontend.SSEStreamPath, "MCP, 2024-11-05 HTTP+SSE (its POSTs to " + frontend.SSEMessagesPath + ")"}}
	for _, v := range p.views {
		if len(v.Access) > 0 {
			continue
		}
		out = append(out, mcpPath{v.Path, "curated endpoint, Streamable HTTP"},
			mcpPath{v.Path + frontend.SSEStreamPath, "curated endpoint, 2024-11-05 HTTP+SSE"})
	}
	return out
}

var rootHTML = template.Must(template.New("root").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Manifold</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:44rem;margin:2rem auto;padding:0 1rem}code{font-size:.95em}td{padding:.15rem 1rem .15rem 0;vertical-align:top}</style>
</head><body>
<h1>Manifold <small>{{.Version}}</small></h1>
<p>One MCP endpoint in front of many MCP servers. Point an MCP client at one of these paths:</p>
<table>{{range .Paths}}<tr><td><code>{{.Path}}</code></td><td>{{.What}}</td></tr>{{end}}</table>
</body></html>
`))

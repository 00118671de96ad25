package catalog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/manifold-mcp/manifold/internal/namespace"
)

// fixtureUpstreams are the tool lists of testdata (see its README), each
// under the upstream name Manifold would give it.
var fixtureUpstreams = []struct{ upstream, file string }{
	{"es", "go-sdk-everything.json"},
	{"ts", "ts-server-everything.json"},
	{"gh", "github-mcp-server.json"},
	{"fs", "server-filesystem.json"},
}

// mergedFixtures is the merged tools/list of the fixture upstreams, each
// name prefixed as Manifold's default (prefix) namespace does.
func mergedFixtures(t testing.TB) []json.RawMessage {
	t.Helper()
	ns := namespace.Namespace{Prefix: true}
	var merged []json.RawMessage
	for _, u := range fixtureUpstreams {
		data, err := os.ReadFile(filepath.Join("testdata", u.file))
		if err != nil {
			t.Fatal(err)
		}
		var tools []map[string]any
		if err := json.Unmarshal(data, &tools); err != nil {
			t.Fatalf("%s: %v", u.file, err)
		}
		for _, tool := range tools {
			tool["name"] = ns.JoinName(u.upstream, tool["name"].(string))
			raw, err := json.Marshal(tool)
			if err != nil {
				t.Fatal(err)
			}
			merged = append(merged, raw)
		}
	}
	return merged
}

// names are the names of raw tool definitions, in order.
func names(t testing.TB, tools []json.RawMessage) []string {
	t.Helper()
	out := make([]string, len(tools))
	for i, raw := range tools {
		var tool struct{ Name string }
		if err := json.Unmarshal(raw, &tool); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		out[i] = tool.Name
	}
	return out
}

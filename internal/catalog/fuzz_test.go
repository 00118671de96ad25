package catalog

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// FuzzFind: whatever the list and the query, Build and Find do not panic,
// an answer holds at most the clamped limit of well-formed tools
// of the list, the same index answers the same query the same way, and
// Summary renders one line per tool.
func FuzzFind(f *testing.F) {
	// A few real tools each, not whole lists: the fuzzer minimizes every
	// input it finds interesting, which takes long on a 100 KiB one.
	merged := mergedFixtures(f)
	for i := 0; i < len(merged); i += 4 {
		data, _ := json.Marshal(merged[i:min(i+4, len(merged))])
		f.Add(data, "read a file", 0)
	}
	f.Add([]byte(`[{"name":"getHTTPServer_v2","description":"ünïcödé\nline"},{"name":"x"},7,null]`), "HTTP server", 51)
	f.Add([]byte(`{"name":"solo","inputSchema":{"properties":{"a":{"items":{"properties":{"b":{}}}}}}}`), "b", -1)
	f.Fuzz(func(t *testing.T, list []byte, query string, limit int) {
		var tools []json.RawMessage
		if json.Unmarshal(list, &tools) != nil {
			tools = []json.RawMessage{list}
		}
		ix := Build(tools)
		got := ix.Find(query, limit)
		if len(got) > clampLimit(limit) || len(got) > ix.Len() {
			t.Fatalf("Find(%q, %d) answered %d tools of %d", query, limit, len(got), ix.Len())
		}
		for _, raw := range got {
			if _, ok := parse(raw); !ok {
				t.Fatalf("answered %s, which is malformed", raw)
			}
		}
		if again := Build(tools).Find(query, limit); !slices.EqualFunc(got, again, func(x, y json.RawMessage) bool { return bytes.Equal(x, y) }) {
			t.Fatalf("Find(%q) answered %s, then %s", query, got, again)
		}
		if n := strings.Count(Summary(got), "\n"); len(got) > 0 && n != len(got) {
			t.Fatalf("Summary of %d tools has %d lines", len(got), n)
		}
	})
}

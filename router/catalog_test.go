package router

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/manifold-mcp/manifold/internal/catalog"
)

// The kept indexes are bounded in number and in tools all told, the least
// recently used dropped first, and their memory with them: 100 lists of
// 2,500 tools each (a caller per list) leave at most maxKeptTools tools
// indexed.
func TestIndexesBounded(t *testing.T) {
	c := newIndexes()
	tools := make([]json.RawMessage, 2500)
	build := func(list int) func() *catalog.Index {
		return func() *catalog.Index {
			for i := range tools {
				tools[i] = fmt.Appendf(nil, `{"name":"t%d_%d","description":"tool %d of list %d","inputSchema":{"type":"object"}}`, list, i, i, list)
			}
			return catalog.Build(tools)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for list := range 100 {
		c.get(sha256.Sum256(fmt.Append(nil, list)), 100*len(tools), build(list))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if c.tools > maxKeptTools || c.order.Len() > maxIndexes {
		t.Fatalf("%d indexes of %d tools kept, want at most %d and %d", c.order.Len(), c.tools, maxIndexes, maxKeptTools)
	}
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d indexes, %d tools, %.1f MiB held", c.order.Len(), c.tools, float64(held)/(1<<20))
	if held > 50<<20 { // 40 indexes of 2,500 tools: about 39 MiB
		t.Errorf("the kept indexes hold %.1f MiB", float64(held)/(1<<20))
	}
	recent := sha256.Sum256(fmt.Append(nil, 99))
	if _, ok := c.by[recent]; !ok {
		t.Error("the most recent index was dropped")
	}
}

// An upstream sizes its tools' definitions: the kept indexes are bounded
// in their bytes too, whatever their number of tools. 40 lists of one
// 4 MiB definition leave at most maxKeptBytes of them kept.
func TestIndexesBoundedInBytes(t *testing.T) {
	c := newIndexes()
	big := fmt.Appendf(nil, `{"name":"big","description":%q,"inputSchema":{"type":"object"}}`, strings.Repeat("word ", 4<<20/5))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for list := range 40 {
		c.get(sha256.Sum256(fmt.Append(nil, list)), len(big), func() *catalog.Index {
			return catalog.Build([]json.RawMessage{bytes.Clone(big)})
		})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d indexes, %d bytes of definitions, %.1f MiB held", c.order.Len(), c.bytes, float64(held)/(1<<20))
	if c.bytes > maxKeptBytes || held > 3*maxKeptBytes { // the definitions, and the index's copies of them
		t.Errorf("%d indexes of %d bytes kept (%.1f MiB held), want at most %d bytes", c.order.Len(), c.bytes, float64(held)/(1<<20), maxKeptBytes)
	}
}

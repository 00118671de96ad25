package catalog

import (
	"encoding/json"
	"runtime"
	"testing"
)

// benchQueries are asked in turn of the fleet: some match a few tools
// well, some many tools a little.
var benchQueries = []string{
	"create a new invoice in Stripe",
	"list open tickets",
	"delete a deployment",
	"search messages in a channel by keywords",
	"export records as CSV for a date range",
	"subscribe to changes of an incident",
	"who is assigned to this sprint task",
	"get the dashboard by its ID",
}

// BenchmarkFind is one find_tools query over the 2,000 tools of the
// synthetic fleet, answering the default 8.
func BenchmarkFind(b *testing.B) {
	ix := Build(fleet())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ix.Find(benchQueries[i%len(benchQueries)], 0)
		i++
	}
}

// BenchmarkBuild is indexing the fleet's 2,000 tools, as a search endpoint
// does when its list changes. It also reports the heap the index holds per
// 1,000 tools (the definitions it keeps, compacted, included), and the
// size of those definitions alone.
func BenchmarkBuild(b *testing.B) {
	list := fleet()
	heap, defs := indexMemory(list)
	b.ReportAllocs()
	for b.Loop() {
		Build(list)
	}
	// After the loop: its first round resets what was reported before.
	b.ReportMetric(heap*1000/float64(len(list)), "heap-B/1000tools")
	b.ReportMetric(defs*1000/float64(len(list)), "defs-B/1000tools")
}

// indexMemory is the growth of the live heap when list is indexed, and
// the bytes of the definitions the index keeps.
func indexMemory(list []json.RawMessage) (heap, defs float64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ix := Build(list)
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, t := range ix.tools {
		defs += float64(len(t.raw))
	}
	runtime.KeepAlive(ix)
	return float64(after.HeapAlloc) - float64(before.HeapAlloc), defs
}

// BenchmarkListBytes compares the bytes of a tools/list result at a full
// endpoint (every tool, each as its server defines it, compacted) with
// those at a search endpoint (find_tools and call_tool), for the go-sdk
// everything-server, the TS server-everything, the four fixture servers
// merged, and the synthetic fleet of 2,000 tools.
func BenchmarkListBytes(b *testing.B) {
	es, ts := fixture(b, "go-sdk-everything.json"), fixture(b, "ts-server-everything.json")
	for _, c := range []struct {
		name string
		list []json.RawMessage
	}{{"es", es}, {"ts", ts}, {"fixtures", mergedFixtures(b)}, {"fleet", fleet()}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				listBytes(b, c.list)
			}
			b.ReportMetric(float64(len(c.list)), "tools")
			b.ReportMetric(float64(listBytes(b, c.list)), "full-B")
			b.ReportMetric(float64(listBytes(b, Tools())), "search-B")
		})
	}
}

// listBytes is the size of the result of a tools/list listing tools.
func listBytes(b *testing.B, tools []json.RawMessage) int {
	out, err := json.Marshal(map[string]any{"tools": tools}) // compacts each tool
	if err != nil {
		b.Fatal(err)
	}
	return len(out)
}

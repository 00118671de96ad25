package test

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// read_timeout bounds reading a request, not answering it: a tool call
// that runs past it (well within call_timeout) is answered whole.
func TestCallOutlastsReadTimeout(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	addSleepTool(s)
	up := modernSDK(t, s)
	url, _ := startManifoldProcess(t, "read_timeout: 1s\nupstreams:"+httpUpstreamYAML("slow", up.URL))
	r := callTool(t, url, "slow_sleep", `{"ms":2500}`)
	if r.Status != 200 || r.Error != nil || !strings.Contains(string(r.Body), "slept 2500 ms") {
		t.Fatalf("a 2.5 s call behind read_timeout 1s: HTTP %d %s", r.Status, r.Body)
	}
}

package config

import (
	"os"
	"testing"
)

// Any file gives a config or problems, never both, never a panic; every
// problem says what is wrong; and a file that parses parses the same way
// again.
func FuzzParse(f *testing.F) {
	if example, err := os.ReadFile("../../config.example.yaml"); err == nil {
		f.Add(example)
	}
	f.Add([]byte("upstreams: [{name: a, url: http://x/mcp, timeout: forever, extra: 1}]\nlisten: nowhere"))
	f.Add([]byte("a: &x {b: *x}\nupstreams: *x"))
	f.Add([]byte("upstreams:\n  - name: n\n    command: [\"${CMD:-sh}\", -c, \"exit\"]\n    tools: {allow: [\"[\"]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, problems := Parse(data, env(map[string]string{"CMD": "sh"}))
		if (cfg == nil) == (len(problems) == 0) {
			t.Fatalf("config %v with %d problems", cfg != nil, len(problems))
		}
		for _, p := range problems {
			if p.Message == "" {
				t.Fatalf("a problem at %q without a message", p.Path)
			}
		}
		if cfg == nil {
			return
		}
		again, problems := Parse(data, env(map[string]string{"CMD": "sh"}))
		if again == nil || len(again.Upstreams) != len(cfg.Upstreams) || again.Listen != cfg.Listen {
			t.Fatalf("parsed differently the second time: %v", problems)
		}
	})
}

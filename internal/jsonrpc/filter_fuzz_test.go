package jsonrpc

import (
	"encoding/json"
	"testing"
)

// FilterItems returns on any input, valid JSON or not (it once spun
// forever on `{"tools":[_"name":"x"},1,`), and what it makes of valid JSON
// is valid JSON.
func FuzzFilterItems(f *testing.F) {
	f.Add([]byte(`{"tools":[_"name":"x"},1,`))
	f.Add([]byte(`{"tools":[{"name":"a"}, 2 ,[3],"s",{"b":1}],"x":1}`))
	f.Add([]byte(`{"tools":null}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		n := 0
		out, err := FilterItems(raw, "tools", func(json.RawMessage) (bool, error) { n++; return n%2 == 0, nil })
		if err == nil && json.Valid(raw) && !json.Valid(out) {
			t.Fatalf("%s became %s", raw, out)
		}
	})
}

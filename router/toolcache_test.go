package router

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/cache"
	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
)

// hintedByMaps and presentByMaps are the tool cache's rewrites as the full
// decode and encode they replaced: the references the byte-level passes
// are held to.
func hintedByMaps(tc *toolCall, res json.RawMessage) (json.RawMessage, error) {
	obj, err := jsonrpc.ParseObject(res)
	if err != nil {
		return nil, err
	}
	ttl, scope := int64(0), mcp.ScopePrivate
	if obj.String("resultType") == mcp.ResultTypeComplete && string(obj["isError"]) != "true" {
		ttl, scope = tc.ttl.Milliseconds(), tc.scope
	}
	obj["ttlMs"] = strconv.AppendInt(nil, ttl, 10)
	obj["cacheScope"] = jsonrpc.Quote(scope)
	return obj.Marshal(), nil
}

func presentByMaps(tc *toolCall, res json.RawMessage) (json.RawMessage, error) {
	obj, err := jsonrpc.ParseValid(res)
	if err != nil {
		return nil, err
	}
	delete(obj, "ttlMs")
	delete(obj, "cacheScope")
	switch tc.tier {
	case cache.TierMemory, cache.TierRedis, cache.TierStale:
		meta, err := obj.Object("_meta")
		if err != nil {
			meta = jsonrpc.Object{}
		}
		b := append([]byte(`{"tier":"`), tc.tier...)
		b = strconv.AppendInt(append(b, `","ageMs":`...), tc.age.Milliseconds(), 10)
		meta[MetaCache] = append(b, '}')
		obj["_meta"] = meta.Marshal()
	}
	return obj.Marshal(), nil
}

// The tool cache's byte-level rewrites give every result what the full
// decode and encode gives it, as JSON values: the hints it is stored
// under, and what a caller is shown of each tier.
func FuzzToolCacheHints(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"content":[{"type":"text","text":"x"}],"resultType":"complete"}`,
		`{"resultType":"complete","isError":true}`, `{"resultType":"complete","isError":false,"ttlMs":5,"cacheScope":"public"}`,
		`{"resultType":"input_required"}`, `{"_meta":null,"resultType":"complete"}`, `{"_meta":[1]}`, `{"a":1,"a":2}`,
		`{"_meta":{"io.manifold/cache":{"tier":"x"},"k":"v"},"ttlMs":1}`, `{"\u005fmeta":{"y":2},"ttl\u004ds":3}`,
		` { "resultType" : "complete" , "isError" : true } `,
	} {
		for tier := range 5 {
			f.Add([]byte(s), uint8(tier))
		}
	}
	tiers := []string{cache.TierMemory, cache.TierRedis, cache.TierStale, cache.TierFill, cache.TierUpstream}
	f.Fuzz(func(t *testing.T, in []byte, tier uint8) {
		if !json.Valid(in) {
			return
		}
		tc := &toolCall{ttl: time.Minute, scope: mcp.ScopePublic, tier: tiers[int(tier)%len(tiers)], age: 1500 * time.Millisecond}
		for name, pair := range map[string][2]func(*toolCall, json.RawMessage) (json.RawMessage, error){
			"hinted":  {hintedByMaps, (*toolCall).hinted},
			"present": {presentByMaps, (*toolCall).present},
		} {
			want, err := pair[0](tc, in)
			got, gerr := pair[1](tc, in)
			if (err == nil) != (gerr == nil) {
				t.Fatalf("%s %s: reference error %v, byte-level error %v", name, in, err, gerr)
			}
			if err != nil {
				continue
			}
			var a, b any
			if json.Unmarshal(want, &a) != nil || json.Unmarshal(got, &b) != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("%s %s (tier %s):\nreference  %s\nbyte-level %s", name, in, tc.tier, want, got)
			}
		}
	})
}

// Package catalog finds, among the tools of one merged tools/list, the few
// that fit what an agent asks for in words, so that an endpoint can show the
// agent two tools (find_tools and call_tool) instead of hundreds.
//
// Build reads each tool's definition once and keeps an inverted index of its
// words: the name (split on '_', '-', '.' and camelCase, and whole), the
// title, the description, and the names and descriptions of the parameters
// (inputSchema.properties, and one level below). Words are lowercased, stop
// words dropped, and common English suffixes stripped, the same way for the
// tools and the query. Each field counts with its own weight (a word in the
// name says more than one in a parameter's description), and Find ranks the
// tools by BM25 over those weighted counts: a word scores more the rarer it
// is among the tools and the more it occurs in the tool, less in a long
// definition than in a short one. Ties go to the smaller name, so the same
// index answers the same query the same way. There is no model and no
// embedding: the ranking is lexical, cheap, and explainable.
//
// An Index is immutable once built, and safe for concurrent use: a changed
// list is a new Index. Everything a peer or a caller controls is bounded:
// the text read from one tool, the words of one query, the number of tools
// one Find answers. A definition that is not a JSON object with a name is
// skipped.
package catalog

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"slices"
)

// BM25's constants, the usual ones: k1 is how soon more occurrences of a
// word stop adding to a tool's score, b how much a long definition dilutes
// them.
const (
	k1 = 1.2
	b  = 0.75
)

// The bounds of Find: a query's distinct words (more say nothing a shorter
// query would not), and how many tools one answer holds.
const (
	maxQueryWords = 32
	maxQueryBytes = 1024
	defaultLimit  = 8
	maxLimit      = 50
)

// Index is the searchable form of one tools/list.
type Index struct {
	tools    []entry
	postings map[string][]posting
	avgLen   float64
}

// entry is one indexed tool: its definition (compacted, as the caller sees
// it otherwise), its name, and the weighted count of its words.
type entry struct {
	raw  json.RawMessage
	name string
	len  float64
}

// posting says that a word occurs in tools[tool], with weighted count tf.
type posting struct {
	tool uint32
	tf   float32
}

// Build indexes tools, each a tool definition of a tools/list as the caller
// sees it. Definitions that are not JSON objects with a non-empty string
// name are skipped. Names are not checked for repeats: a merged list has
// none, and an index that dropped a later tool for an earlier one's name
// would let one upstream hide another's tool.
func Build(tools []json.RawMessage) *Index {
	ix := &Index{postings: make(map[string][]posting)}
	var total float64
	for _, raw := range tools {
		def, ok := parse(raw)
		if !ok {
			continue
		}
		counts, length := def.words()
		id := uint32(len(ix.tools))
		for w, tf := range counts {
			ix.postings[w] = append(ix.postings[w], posting{id, tf})
		}
		ix.tools = append(ix.tools, entry{raw: compact(raw), name: def.Name, len: length})
		total += length
	}
	if len(ix.tools) > 0 {
		ix.avgLen = total / float64(len(ix.tools))
	}
	return ix
}

// compact is a copy of raw without insignificant space: the index does not
// share the caller's buffer, and an answer of 50 tools is no larger than it
// needs to be. raw has been parsed already, so it is valid.
func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	buf.Grow(len(raw))
	_ = json.Compact(&buf, raw)
	return buf.Bytes()
}

// Len is the number of tools indexed.
func (ix *Index) Len() int { return len(ix.tools) }

// Find answers the definitions of the tools that best match query, best
// first, at most limit of them: limit is clamped to 1..50, and 0 means 8. A
// query with no word that counts (empty, or only stop words) finds nothing,
// as does a query none of whose words any tool has.
func (ix *Index) Find(query string, limit int) []json.RawMessage {
	limit = clampLimit(limit)
	scores := make(map[uint32]float64)
	for _, w := range queryWords(query) {
		ix.score(w, scores)
	}
	ranked := make([]uint32, 0, len(scores))
	for id := range scores {
		ranked = append(ranked, id)
	}
	slices.SortFunc(ranked, func(x, y uint32) int {
		if c := cmp.Compare(scores[y], scores[x]); c != 0 {
			return c
		}
		return cmp.Compare(ix.tools[x].name, ix.tools[y].name)
	})
	out := make([]json.RawMessage, 0, min(limit, len(ranked)))
	for _, id := range ranked[:min(limit, len(ranked))] {
		out = append(out, ix.tools[id].raw)
	}
	return out
}

// score adds word's BM25 term to the score of each tool that has it.
func (ix *Index) score(word string, scores map[uint32]float64) {
	list := ix.postings[word]
	if len(list) == 0 {
		return
	}
	n, df := float64(len(ix.tools)), float64(len(list))
	idf := math.Log(1 + (n-df+0.5)/(df+0.5))
	for _, p := range list {
		tf := float64(p.tf)
		norm := k1 * (1 - b + b*ix.tools[p.tool].len/ix.avgLen)
		scores[p.tool] += idf * tf * (k1 + 1) / (tf + norm)
	}
}

func clampLimit(limit int) int {
	if limit == 0 {
		return defaultLimit
	}
	return max(1, min(limit, maxLimit))
}

// queryWords are the distinct words of query that count, in the order
// given, at most maxQueryWords of them from its first maxQueryBytes.
func queryWords(query string) []string {
	if len(query) > maxQueryBytes {
		query = query[:maxQueryBytes]
	}
	var out []string
	for w := range words(query, true) {
		if !slices.Contains(out, w) {
			out = append(out, w)
			if len(out) == maxQueryWords {
				break
			}
		}
	}
	return out
}

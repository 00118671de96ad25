package catalog

import (
	"encoding/json"
	"maps"
	"slices"
)

// The bounds of what is read from one tool's definition: each text (a
// description can be any length), the parameters at each level, and the
// words counted in all. What lies beyond is not searched.
const (
	maxTextBytes = 2048
	maxParams    = 64
	maxToolWords = 512
)

// How much one occurrence of a word counts, by where it is: a tool's name
// and title say what it does, its description says it at length, and its
// parameters say what it works on.
const (
	nameWeight             = 3
	titleWeight            = 2
	descriptionWeight      = 1
	paramNameWeight        = 1
	paramDescriptionWeight = 0.5
)

// definition is what the index reads of one tool: its name, and its texts
// in the order they are counted, most telling first.
type definition struct {
	Name  string
	texts []text
}

type text struct {
	s      string
	weight float32
	whole  bool // names are also counted whole
}

// parse reads raw leniently: only a name is required; a field of the wrong
// type is not searched.
func parse(raw json.RawMessage) (definition, bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return definition{}, false
	}
	var name string
	if json.Unmarshal(fields["name"], &name) != nil || name == "" {
		return definition{}, false
	}
	d := definition{Name: name, texts: []text{
		{name, nameWeight, true},
		{str(fields["title"]), titleWeight, false},
		{str(object(fields["annotations"])["title"]), titleWeight, false},
		{str(fields["description"]), descriptionWeight, false},
	}}
	d.params(object(object(fields["inputSchema"])["properties"]), true)
	return d, true
}

// params adds the names and descriptions of a schema's properties and, if
// nested, of the properties of each one's object or array items.
func (d *definition) params(props map[string]json.RawMessage, nested bool) {
	names := slices.Sorted(maps.Keys(props))
	for _, name := range names[:min(len(names), maxParams)] {
		p := object(props[name])
		d.texts = append(d.texts,
			text{name, paramNameWeight, true},
			text{str(p["description"]), paramDescriptionWeight, false})
		if nested {
			d.params(object(p["properties"]), false)
			d.params(object(object(p["items"])["properties"]), false)
		}
	}
}

// words counts the words of d's texts, each occurrence by its text's
// weight, up to maxToolWords, and says their weighted number.
func (d definition) words() (counts map[string]float32, length float64) {
	counts = make(map[string]float32)
	n := 0
	for _, t := range d.texts {
		s := t.s[:min(len(t.s), maxTextBytes)]
		for w := range words(s, t.whole) {
			if n == maxToolWords {
				return counts, length
			}
			counts[w] += t.weight
			length += float64(t.weight)
			n++
		}
	}
	return counts, length
}

// str is raw as a string, or "" if it is not one.
func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// object is raw as a JSON object, or nil if it is not one.
func object(raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	return m
}

package catalog

import (
	"encoding/json"
	"errors"
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

// toolJSON is what the index reads of a tool's definition.
type toolJSON struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Annotations struct {
		Title string `json:"title"`
	} `json:"annotations"`
	InputSchema struct {
		Properties map[string]paramJSON `json:"properties"`
	} `json:"inputSchema"`
}

// paramJSON is a parameter's schema, with the properties of an object or
// of an array's items: the index reads one level below the parameters.
type paramJSON struct {
	Description string              `json:"description"`
	Properties  map[string]leafJSON `json:"properties"`
	Items       struct {
		Properties map[string]leafJSON `json:"properties"`
	} `json:"items"`
}

type leafJSON struct {
	Description string `json:"description"`
}

// parse reads raw leniently: it must be a JSON object with a name, and a
// field of the wrong type is left out of the search. (json.Unmarshal skips
// such a field and decodes the rest, in one pass.)
func parse(raw json.RawMessage) (definition, bool) {
	var t toolJSON
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(raw, &t); err != nil && !errors.As(err, &typeErr) || t.Name == "" {
		return definition{}, false
	}
	d := definition{Name: t.Name, texts: []text{
		{t.Name, nameWeight, true},
		{t.Title, titleWeight, false},
		{t.Annotations.Title, titleWeight, false},
		{t.Description, descriptionWeight, false},
	}}
	d.params(t.InputSchema.Properties)
	return d, true
}

// params adds the names and descriptions of a schema's properties, and of
// the properties of each one's object or array items.
func (d *definition) params(props map[string]paramJSON) {
	for _, name := range firstNames(props) {
		p := props[name]
		d.param(name, p.Description)
		for _, sub := range firstNames(p.Properties) {
			d.param(sub, p.Properties[sub].Description)
		}
		for _, sub := range firstNames(p.Items.Properties) {
			d.param(sub, p.Items.Properties[sub].Description)
		}
	}
}

func (d *definition) param(name, description string) {
	d.texts = append(d.texts, text{name, paramNameWeight, true}, text{description, paramDescriptionWeight, false})
}

// firstNames are the first maxParams names of props in order, so that the
// same schema is read the same way.
func firstNames[T any](props map[string]T) []string {
	names := slices.Sorted(maps.Keys(props))
	return names[:min(len(names), maxParams)]
}

// words counts the words of d's texts, each occurrence by its text's
// weight, up to maxToolWords, and says their weighted number.
func (d definition) words() (counts map[string]float32, length float64) {
	counts = make(map[string]float32)
	var buf []string
	n := 0
	for _, t := range d.texts {
		if n == maxToolWords {
			break
		}
		buf = appendWords(buf[:0], t.s[:min(len(t.s), maxTextBytes)], t.whole)
		for _, w := range buf[:min(len(buf), maxToolWords-n)] {
			counts[w] += t.weight
			length += float64(t.weight)
		}
		n += min(len(buf), maxToolWords-n)
	}
	return counts, length
}

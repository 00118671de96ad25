package catalog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// tool is a raw definition with a name and a description.
func tool(name, description string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"name":%q,"description":%q,"inputSchema":{"type":"object"}}`, name, description))
}

// TestWordsMeet: the forms a person uses for one thing index as one word,
// whichever way the tool's author or the agent spelled it.
func TestWordsMeet(t *testing.T) {
	for _, forms := range [][]string{
		{"file", "files", "filing"},
		{"create", "creates", "created", "creating"},
		{"directory", "directories"},
		{"repository", "repositories"},
		{"run", "running", "runs"},
		{"getFileInfo", "get_file_info", "get-file-info", "get.file.info", "Get file info"},
		{"HTTPServer", "http server"},
		{"the file", "a file", "file of"},
	} {
		want := slices.Collect(words(forms[0], false))
		if len(want) == 0 {
			t.Fatalf("%q has no words", forms[0])
		}
		for _, f := range forms[1:] {
			if got := slices.Collect(words(f, false)); !slices.Equal(got, want) {
				t.Errorf("%q: words %q, but %q: %q", forms[0], want, f, got)
			}
		}
	}
	if got := slices.Collect(words("the of a I, to", true)); len(got) != 0 {
		t.Errorf("stop words counted: %q", got)
	}
}

// TestFindExactName: a query naming a tool finds it first, before a tool
// with the same words in another order.
func TestFindExactName(t *testing.T) {
	ix := Build([]json.RawMessage{
		tool("files_search", "Search the files."),
		tool("search_files", "Search the files."),
		tool("search_code", "Search the code of the files."),
	})
	if got := names(t, ix.Find("search_files", 0)); len(got) != 3 || got[0] != "search_files" {
		t.Errorf("Find(search_files) = %v, want search_files first", got)
	}
}

// TestFindLimit: an answer holds 8 tools unless the caller says otherwise,
// never more than 50 and at least 1.
func TestFindLimit(t *testing.T) {
	var list []json.RawMessage
	for i := range 60 {
		list = append(list, tool(fmt.Sprintf("widget_%02d", i), "Makes a widget."))
	}
	ix := Build(list)
	for limit, want := range map[int]int{0: 8, 3: 3, 50: 50, 51: 50, 1000: 50, -3: 1} {
		if got := len(ix.Find("widget", limit)); got != want {
			t.Errorf("Find(widget, %d) answered %d tools, want %d", limit, got, want)
		}
	}
}

// TestFindDeterministic: tools that score alike are answered in name
// order, however the list was ordered when the index was built.
func TestFindDeterministic(t *testing.T) {
	var list []json.RawMessage
	for _, n := range []string{"c_widget", "a_widget", "d_widget", "b_widget"} {
		list = append(list, tool(n, "Makes a widget."))
	}
	want := []string{"a_widget", "b_widget", "c_widget", "d_widget"}
	for range 3 {
		if got := names(t, Build(list).Find("widget", 0)); !slices.Equal(got, want) {
			t.Fatalf("Find(widget) = %v, want %v", got, want)
		}
		slices.Reverse(list)
		list = append(list[1:], list[0])
	}
}

// TestFindNothing: a query without a word that counts, or with words no
// tool has, finds nothing rather than anything.
func TestFindNothing(t *testing.T) {
	ix := Build([]json.RawMessage{tool("read_file", "Read a file.")})
	for _, q := range []string{"", "   ", "the of a", "zebra", "?!"} {
		if got := ix.Find(q, 0); len(got) != 0 {
			t.Errorf("Find(%q) = %s, want nothing", q, got)
		}
	}
}

// TestBuildSkipsMalformed: a definition that is not an object with a name
// is left out, and a field of the wrong type does not cost a tool its
// place.
func TestBuildSkipsMalformed(t *testing.T) {
	ix := Build([]json.RawMessage{
		json.RawMessage(`[]`), json.RawMessage(`"widget"`), json.RawMessage(`{}`), json.RawMessage(`null`),
		json.RawMessage(`{"name":5,"description":"widget"}`), json.RawMessage(`{"name":"","description":"widget"}`),
		json.RawMessage(`{"name":"broken","description":"widget"`), nil,
		json.RawMessage(`{"name": "make_widget", "title": 7, "description": "Makes a widget.", "inputSchema": "x", "annotations": []}`),
	})
	got := ix.Find("widget", 0)
	if ix.Len() != 1 || len(got) != 1 {
		t.Fatalf("Len() = %d, Find(widget) = %s; want the one well-formed tool", ix.Len(), got)
	}
	want := `{"name":"make_widget","title":7,"description":"Makes a widget.","inputSchema":"x","annotations":[]}`
	if string(got[0]) != want {
		t.Errorf("Find(widget) = %s, want %s", got[0], want)
	}
}

// TestBuildHidesNothing: a tool that claims another's name, in any case,
// does not take that tool's place.
func TestBuildHidesNothing(t *testing.T) {
	ix := Build([]json.RawMessage{
		json.RawMessage(`{"name":"evil_widget","NAME":"gh_make_widget","description":"Makes a widget."}`),
		json.RawMessage(`{"name":"gh_make_widget","description":"Makes a widget."}`),
		json.RawMessage(`{"name":"gh_make_widget","description":"Makes a widget."}`),
	})
	if got := ix.Find("widget", 0); len(got) != 3 {
		t.Errorf("Find(widget) = %s, want all three", got)
	}
}

// TestFindWholeDefinition: a tool is answered with everything the list
// said of it, found by any of its fields: title, annotations' title,
// parameter names and descriptions, and those of a nested parameter.
func TestFindWholeDefinition(t *testing.T) {
	raw := json.RawMessage(`{"name":"t1","title":"Zebra","description":"Does things.",
		"inputSchema":{"type":"object","properties":{"giraffe_id":{"type":"string","description":"The okapi."},
		"filter":{"type":"object","properties":{"lemur":{"type":"string","description":"A gazelle."}}},
		"rows":{"type":"array","items":{"properties":{"koala":{"type":"number"}}}}}},
		"annotations":{"title":"Wombat","readOnlyHint":true},"_meta":{"x":1}}`)
	ix := Build([]json.RawMessage{raw, tool("t2", "Other things.")})
	for _, q := range []string{"zebra", "wombat", "giraffe", "okapi", "lemur", "gazelle", "koala"} {
		got := ix.Find(q, 0)
		if len(got) != 1 {
			t.Errorf("Find(%q) = %s, want t1", q, got)
			continue
		}
		var a, b any
		if json.Unmarshal(raw, &a) != nil || json.Unmarshal(got[0], &b) != nil || fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("Find(%q) = %s, want the whole definition %s", q, got[0], raw)
		}
	}
}

// TestToolTextBounded: what one tool's definition says beyond the bounds
// is not searched, however long it is.
func TestToolTextBounded(t *testing.T) {
	long := strings.Repeat("ab ", maxToolWords) // within maxTextBytes
	huge := strings.Repeat("x", 4<<20)
	ix := Build([]json.RawMessage{
		tool("early", "zebra "+long),
		tool("late", long+" okapi"),
		tool("deep", huge+" lemur"),
	})
	if got := names(t, ix.Find("zebra", 0)); !slices.Equal(got, []string{"early"}) {
		t.Errorf("Find(zebra) = %v, want early", got)
	}
	for _, q := range []string{"okapi", "lemur"} {
		if got := ix.Find(q, 0); len(got) != 0 {
			t.Errorf("Find(%q) = %v: a word past the bound was indexed", q, names(t, got))
		}
	}
}

// TestQueryBounded: a query counts its first 32 distinct words, from its
// first KiB; the rest is not looked up.
func TestQueryBounded(t *testing.T) {
	ix := Build([]json.RawMessage{tool("make_widget", "Makes a widget.")})
	var many []string
	for i := range maxQueryWords {
		many = append(many, fmt.Sprintf("w%d", i))
	}
	cases := map[string]int{
		"widget " + strings.Join(many, " "):                1,
		strings.Join(many, " ") + " widget":                0,
		strings.Repeat("w1 ", maxQueryBytes/3) + " widget": 0,
	}
	for q, want := range cases {
		if got := len(ix.Find(q, 0)); got != want {
			t.Errorf("Find(%.40q…) found %d tools, want %d", q, got, want)
		}
	}
}

// TestSummary: the text rendering shows one line per tool, its name and
// the first line of its description, or its title, cut if long.
func TestSummary(t *testing.T) {
	got := Summary([]json.RawMessage{
		tool("read_file", "Read a file.\nSecond line."),
		json.RawMessage(`{"name":"titled","title":"A  titled\ttool"}`),
		tool("long", strings.Repeat("é", 300)),
		json.RawMessage(`{"name":"bare"}`),
	})
	want := "read_file: Read a file.\ntitled: A titled tool\nlong: " + strings.Repeat("é", maxSummaryLine/2) + "…\nbare\n"
	if got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	if got := Summary(nil); got != "No tool matches the query." {
		t.Errorf("Summary(nil) = %q", got)
	}
}

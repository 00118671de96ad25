package catalog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/manifold-mcp/manifold/internal/clip"
)

// The names of the two tools a search endpoint lists.
const (
	FindTools = "find_tools"
	CallTool  = "call_tool"
)

// tools are the definitions of find_tools and call_tool, written for the
// agent that reads them: what to search with, what comes back, and that a
// found tool is called through call_tool.
var tools = []json.RawMessage{compact(json.RawMessage(fmt.Sprintf(`{
	"name": %q,
	"title": "Find tools",
	"description": "Search the tools available here and return the best matches, best first, each with its full definition (name, description, inputSchema). Describe the task in a few words, such as \"read a file\" or \"create a pull request\". Then call a tool found here with call_tool, using its name and arguments that fit its inputSchema.",
	"inputSchema": {
		"type": "object",
		"properties": {
			"query": {"type": "string", "description": "What the tool should do, in a few words."},
			"limit": {"type": "integer", "minimum": 1, "maximum": %d, "default": %d, "description": "How many tools to return at most."}
		},
		"required": ["query"]
	},
	"outputSchema": {
		"type": "object",
		"properties": {"tools": {"type": "array", "items": {"type": "object"}}},
		"required": ["tools"]
	},
	"annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false}
}`, FindTools, maxLimit, defaultLimit))), compact(json.RawMessage(fmt.Sprintf(`{
	"name": %q,
	"title": "Call a tool",
	"description": "Call a tool found with find_tools, by its exact name, with arguments that fit its inputSchema. The result is that tool's result.",
	"inputSchema": {
		"type": "object",
		"properties": {
			"name": {"type": "string", "description": "The tool's name, exactly as find_tools returned it."},
			"arguments": {"type": "object", "description": "The tool's arguments, as its inputSchema describes them."}
		},
		"required": ["name"]
	}
}`, CallTool)))}

// Tools are the definitions of find_tools and call_tool, the two tools a
// search endpoint lists. Each call answers its own copy, which the caller
// may keep or change.
func Tools() []json.RawMessage {
	out := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		out[i] = slices.Clone(t)
	}
	return out
}

// maxSummaryLine bounds the description shown for one tool in a Summary.
const maxSummaryLine = 200

// Summary is the short text rendering of found tools, as a find_tools
// answer shows them beside its structured content: one line per tool, its
// name and the first line of its description (or its title).
func Summary(found []json.RawMessage) string {
	if len(found) == 0 {
		return "No tool matches the query."
	}
	var sb strings.Builder
	for _, raw := range found {
		fields := object(raw)
		line := firstLine(str(fields["description"]))
		if line == "" {
			line = firstLine(str(fields["title"]))
		}
		sb.WriteString(summaryName(str(fields["name"])))
		if line != "" {
			sb.WriteString(": " + clip.Text(line, maxSummaryLine))
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

// summaryName is name as a Summary shows it: quoted if it has a space or
// a character that does not print (a tool's name should have neither, but
// it comes from a peer, and one line must stay one tool), cut if long.
func summaryName(name string) string {
	odd := func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }
	if strings.IndexFunc(name, odd) >= 0 {
		name = strconv.Quote(name)
	}
	return clip.Text(name, maxSummaryLine)
}

// firstLine is the first non-blank line of s, its spaces collapsed.
func firstLine(s string) string {
	for line := range strings.Lines(s) {
		if f := strings.Fields(line); len(f) > 0 {
			return strings.Join(f, " ")
		}
	}
	return ""
}

package catalog

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// fleetUpstreams are the names of a synthetic fleet's upstreams: services
// an organization puts behind one endpoint.
var fleetUpstreams = strings.Fields(`jira slack postgres stripe notion linear sentry datadog s3 calendar
	gmail drive salesforce hubspot zendesk pagerduty kubernetes docker terraform vault
	redis mongo elastic grafana figma asana trello confluence bitbucket gitlab
	twilio sendgrid shopify zoom dropbox box airtable snowflake bigquery okta`)

// fleetEntities are what the fleet's tools work on; each upstream draws 5.
// No two share a stem (the stemmer makes "recording" "record"), so each
// tool is told apart by its words.
var fleetEntities = strings.Fields(`invoice customer ticket issue project message channel user team
	document page comment attachment payment subscription refund order product
	alert incident dashboard metric log trace deployment pod secret bucket object
	table query record event meeting webinar contact deal campaign workflow
	pipeline job schedule webhook label tag report note task board sprint release`)

type fleetVerb struct {
	verb, description string
	params            []string // name:type:description
}

// fleetVerbs are what a tool does to an entity, with its description and
// its parameters; each upstream has every verb for each of its entities.
var fleetVerbs = []fleetVerb{
	{"list", "List %[1]ss in %[2]s, newest first. Results are paginated: pass the cursor of the previous page to get the next one.",
		[]string{"cursor:string:Cursor from the previous page", "limit:integer:Maximum number of %[1]ss to return (1-100)", "filter:string:Only %[1]ss whose fields match this expression"}},
	{"get", "Get one %[1]s from %[2]s by its ID, with all of its fields.",
		[]string{"id:string:The %[1]s's ID"}},
	{"create", "Create a new %[1]s in %[2]s. Returns the created %[1]s and its ID.",
		[]string{"name:string:A short name for the %[1]s", "description:string:Longer text describing the %[1]s", "fields:object:Other fields of the %[1]s, by name"}},
	{"update", "Update fields of an existing %[1]s in %[2]s. Fields not given keep their value.",
		[]string{"id:string:The %[1]s's ID", "fields:object:The fields to change, by name"}},
	{"delete", "Delete a %[1]s from %[2]s permanently. This cannot be undone.",
		[]string{"id:string:The %[1]s's ID", "confirm:boolean:Must be true"}},
	{"search", "Search %[1]ss in %[2]s by keywords in their text, ranked by relevance.",
		[]string{"query:string:Keywords to search for", "limit:integer:Maximum number of results"}},
	{"archive", "Archive a %[1]s in %[2]s: it is hidden from lists but can be restored.",
		[]string{"id:string:The %[1]s's ID"}},
	{"export", "Export %[1]ss from %[2]s as CSV or JSON for a date range.",
		[]string{"format:string:csv or json", "since:string:Start date (YYYY-MM-DD)", "until:string:End date (YYYY-MM-DD)"}},
	{"assign", "Assign a %[1]s in %[2]s to a user or a team.",
		[]string{"id:string:The %[1]s's ID", "assignee:string:User or team to assign it to"}},
	{"watch", "Subscribe to changes of a %[1]s in %[2]s and get notified when it is updated.",
		[]string{"id:string:The %[1]s's ID", "events:array:Which changes to be notified of"}},
}

// fleet is the merged tools/list of a synthetic fleet, 40 upstreams × 50
// tools (10 verbs × 5 entities each), named as Manifold's default
// namespace names them, the same on every call.
func fleet() []json.RawMessage {
	rng := rand.New(rand.NewPCG(40, 50))
	var out []json.RawMessage
	for _, up := range fleetUpstreams {
		perm := rng.Perm(len(fleetEntities))
		for i := range 50 {
			out = append(out, fleetTool(up, fleetEntities[perm[i/len(fleetVerbs)]], fleetVerbs[i%len(fleetVerbs)]))
		}
	}
	return out
}

// fleetTool is the tool of upstream up that does v to entity.
func fleetTool(up, entity string, v fleetVerb) json.RawMessage {
	service := strings.ToUpper(up[:1]) + up[1:]
	props := map[string]any{}
	for _, p := range v.params {
		f := strings.SplitN(p, ":", 3)
		props[f[0]] = map[string]any{"type": f[1], "description": fmt.Sprintf(f[2], entity)}
	}
	raw, _ := json.Marshal(map[string]any{
		"name":        fmt.Sprintf("%s_%s_%s", up, v.verb, entity),
		"title":       fmt.Sprintf("%s %s (%s)", strings.ToUpper(v.verb[:1])+v.verb[1:], entity, service),
		"description": fmt.Sprintf(v.description, entity, service),
		"inputSchema": map[string]any{"type": "object", "properties": props},
		"annotations": map[string]any{"readOnlyHint": v.verb == "list" || v.verb == "get" || v.verb == "search"},
	})
	return raw
}

// TestFleet: the synthetic fleet has 2,000 distinct, well-formed tools,
// the same on every call, and each upstream's create tool is found first by
// what it creates where.
func TestFleet(t *testing.T) {
	list := fleet()
	ix := Build(list)
	if ix.Len() != 2000 || string(fleet()[1234]) != string(list[1234]) {
		t.Fatalf("fleet: %d distinct tools, or not the same twice", ix.Len())
	}
	for _, name := range names(t, list) {
		up, rest, _ := strings.Cut(name, "_")
		entity, ok := strings.CutPrefix(rest, "create_")
		if !ok {
			continue
		}
		q := fmt.Sprintf("create a new %s in %s", entity, up)
		if got := names(t, ix.Find(q, 1)); len(got) != 1 || got[0] != name {
			t.Errorf("Find(%q) = %v, want %s", q, got, name)
		}
	}
}

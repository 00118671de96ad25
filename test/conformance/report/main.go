// Command report turns the conformance run's `go test -json` output (on
// stdin) into docs/conformance.md (on stdout): a table per part of the run,
// a row per scenario with its checks and its result. scripts/conformance
// runs it after the tests; it exits 1 when a scenario failed or none ran.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// part is one test of test/conformance: what it runs, as the page says it.
type part struct {
	test, title, about string
}

var parts = []part{
	{"TestConformance2026", "Server, 2026-07-28",
		"The suite's required 2026-07-28 server scenarios, and the unscored `http-header-validation`, `http-custom-header-server-validation` and `json-schema-2020-12`, sent to Manifold, whose only upstream is the Go SDK's everything-server, stateless (a modern upstream)."},
	{"TestConformance2025LegacyUpstream", "Server, 2025-11-25, legacy upstream",
		"The required 2025-11-25 server scenarios from a legacy caller with a session, through Manifold to the everything-server kept stateful (a legacy upstream)."},
	{"TestConformance2025ModernUpstream", "Server, 2025-11-25, modern upstream (bridged)",
		"The same scenarios from a legacy caller, through Manifold to the stateless everything-server (a modern upstream): Manifold bridges the eras. Four scenarios cannot pass through any proxy: their tools ask the client with `Session.CreateMessage` or `Elicit` while serving the request, which a 2026-07-28 server cannot do; the test asserts that they fail."},
	{"TestConformanceClientAuth", "Client, authorization",
		"The suite's client `auth/*` scenarios with Manifold as the OAuth client of the suite's protected server (`test/conformance/authclient` plays the agent and its consenting user in front of a real `manifold serve`), at the suite's default version (`default` below) and, where the scenario applies, at 2026-07-28."},
}

// scenario is one subtest's outcome.
type scenario struct {
	version, name, action, tally string
}

type event struct {
	Action, Test, Output string
}

var tallyLine = regexp.MustCompile(`tally: (\d+) checks, (\d+) failed( \(expected\))?`)

func main() {
	suite := flag.String("suite", "", "the conformance suite's version")
	commit := flag.String("commit", "", "the commit run")
	date := flag.String("date", "", "when it ran")
	flag.Parse()
	runs, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	write(os.Stdout, runs, *suite, *commit, *date)
	total, failures := 0, 0
	for _, p := range parts {
		_, _, fail := count(runs[p.test])
		total += len(runs[p.test])
		failures += fail
	}
	if failures > 0 || total == 0 {
		fmt.Fprintf(os.Stderr, "report: %d of %d scenarios failed\n", failures, total)
		os.Exit(1)
	}
}

// read gathers each part's scenarios in the order they ran.
func read(r io.Reader) (map[string][]*scenario, error) {
	runs := map[string][]*scenario{}
	byTest := map[string]*scenario{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // go test's own lines (a build failure) are not events
		}
		top, sub, ok := strings.Cut(e.Test, "/")
		if !ok {
			if e.Action == "fail" && e.Test != "" && len(runs[top]) == 0 {
				runs[top] = append(runs[top], &scenario{name: "(the whole part)", action: "fail"})
			}
			continue
		}
		s := byTest[e.Test]
		if s == nil {
			version, name, _ := strings.Cut(sub, "/")
			s = &scenario{version: version, name: name}
			byTest[e.Test] = s
			runs[top] = append(runs[top], s)
		}
		switch e.Action {
		case "output":
			if m := tallyLine.FindString(e.Output); m != "" {
				s.tally = m
			}
		case "pass", "fail", "skip":
			s.action = e.Action
		}
	}
	return runs, sc.Err()
}

func write(w io.Writer, runs map[string][]*scenario, suite, commit, date string) {
	fmt.Fprintf(w, "# Conformance\n\n")
	fmt.Fprintf(w, "The official MCP conformance suite (`@modelcontextprotocol/conformance` %s) run through Manifold by `make conformance`, which writes this page. Run %s at `%s`.\n\n", suite, date, commit)
	fmt.Fprintf(w, "A scenario passes when the suite made checks and every one succeeded. Names and URIs pass through unchanged (`namespace: none`), so the suite's fixed fixture names reach the fixture server. The suite's client scenarios other than `auth/*` (`initialize`, `tools_call`, `request-metadata` and the like) are not run through Manifold yet.\n\n")
	fmt.Fprintf(w, "| part | scenarios | passed | failed as expected | failed |\n|---|---|---|---|---|\n")
	for _, p := range parts {
		pass, expected, fail := count(runs[p.test])
		fmt.Fprintf(w, "| [%s](#%s) | %d | %d | %d | %d |\n", p.title, slug(p.title), len(runs[p.test]), pass, expected, fail)
	}
	for _, p := range parts {
		fmt.Fprintf(w, "\n## %s\n\n%s\n\n| scenario | version | checks | result |\n|---|---|---|---|\n", p.title, p.about)
		for _, s := range runs[p.test] {
			fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", s.name, s.version, checks(s.tally), result(s))
		}
		if len(runs[p.test]) == 0 {
			fmt.Fprintf(w, "| (not run) | | | |\n")
		}
	}
}

func count(ss []*scenario) (pass, expected, fail int) {
	for _, s := range ss {
		switch r := result(s); {
		case r == "pass":
			pass++
		case strings.HasPrefix(r, "fails as expected"):
			expected++
		default:
			fail++
		}
	}
	return pass, expected, fail
}

func result(s *scenario) string {
	switch {
	case s.action == "pass" && strings.HasSuffix(s.tally, "(expected)"):
		return "fails as expected"
	case s.action == "pass":
		return "pass"
	case s.action == "skip":
		return "skipped"
	case s.action == "":
		return "**did not finish**"
	}
	return "**FAIL**"
}

// checks is "n" or "n, m failed" from the tally line.
func checks(tally string) string {
	m := tallyLine.FindStringSubmatch(tally)
	if m == nil {
		return ""
	}
	if m[2] == "0" {
		return m[1]
	}
	return m[1] + ", " + m[2] + " failed"
}

// slug is GitHub's anchor of a heading (test/docs_test.go checks it).
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

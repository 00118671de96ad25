//go:build conformance

package conformance

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// The suite's client auth scenarios, with Manifold as the OAuth client of
// the suite's protected server: authclient (this folder) plays the agent
// and its consenting user in front of a real `manifold serve` whose only
// upstream is that server. Each runs at the suite's default version and,
// where the scenario is also for 2026-07-28, at that version.
var authScenarios = []string{
	"metadata-default", "metadata-var1", "metadata-var2", "metadata-var3", "basic-cimd",
	"scope-from-www-authenticate", "scope-from-scopes-supported", "scope-omitted-when-undefined",
	"scope-step-up", "scope-retry-limit",
	"token-endpoint-auth-basic", "token-endpoint-auth-post", "token-endpoint-auth-none", "pre-registration",
	"2025-03-26-oauth-metadata-backcompat", "2025-03-26-oauth-endpoint-fallback",
	"resource-mismatch", "offline-access-scope", "offline-access-not-supported", "authorization-server-migration",
	"iss-supported", "iss-not-advertised", "iss-supported-missing", "iss-wrong-issuer", "iss-unexpected", "iss-normalized",
	"metadata-issuer-mismatch",
	"client-credentials-jwt", "client-credentials-basic",
	"dpop", "dpop-nonce",
	"enterprise-managed-authorization", "wif-jwt-bearer",
}

// onlyDefault are the scenarios of one version only: the 2026-07-28 ones
// (whose default is 2026-07-28), and those the suite skips at 2026-07-28
// (2025-03-26 servers). The client-credentials and DPoP extensions run at
// both, 2026-07-28 forced.
var onlyDefault = []string{
	"2025-03-26-oauth-metadata-backcompat", "2025-03-26-oauth-endpoint-fallback",
	"resource-mismatch", "offline-access-scope", "offline-access-not-supported", "authorization-server-migration",
	"iss-supported", "iss-not-advertised", "iss-supported-missing", "iss-wrong-issuer", "iss-unexpected", "iss-normalized",
	"metadata-issuer-mismatch",
}

func TestConformanceClientAuth(t *testing.T) {
	node, cli := env(t, "CONFORMANCE_NODE"), env(t, "CONFORMANCE_CLI")
	bin := t.TempDir()
	manifold, client := filepath.Join(bin, "manifold"), filepath.Join(bin, "authclient")
	for out, pkg := range map[string]string{manifold: "../../cmd/manifold", client: "./authclient"} {
		if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
	}
	for _, name := range authScenarios {
		versions := [][]string{{"default"}}
		if !slices.Contains(onlyDefault, name) {
			versions = append(versions, []string{"2026-07-28", "--spec-version", "2026-07-28", "--force"})
		}
		for _, v := range versions {
			t.Run(v[0]+"/"+name, func(t *testing.T) {
				out := t.TempDir()
				args := append([]string{cli, "client", "--command", client + " --manifold " + manifold + " --logs " + filepath.Join(out, "manifold.log"),
					"--scenario", "auth/" + name, "--timeout", "60000", "-o", out}, v[1:]...)
				output, err := exec.Command(node, args...).CombinedOutput()
				t.Logf("%s", output)
				if err != nil {
					if log, rerr := os.ReadFile(filepath.Join(out, "manifold.log")); rerr == nil {
						t.Logf("manifold:\n%s", log)
					}
					t.Errorf("the suite failed the scenario: %v", err)
				}
				assertChecks(t, out)
			})
		}
	}
}

// assertChecks reads the run's checks: there must be some, each a SUCCESS
// (or INFO).
func assertChecks(t *testing.T, out string) {
	files, _ := filepath.Glob(filepath.Join(out, "auth", "*", "checks.json"))
	if len(files) != 1 {
		t.Fatalf("checks.json: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	var checks []check
	if err := json.Unmarshal(b, &checks); err != nil {
		t.Fatal(err)
	}
	if len(checks) == 0 {
		t.Fatal("the scenario made no checks")
	}
	failed := 0
	for _, c := range checks {
		if c.Status != "SUCCESS" && c.Status != "INFO" {
			failed++
			t.Errorf("check %s: %s %s", c.ID, c.Status, c.ErrorMessage)
		}
	}
	logTally(t, len(checks), failed, false)
}

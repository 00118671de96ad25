package auth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestCredentialNeverPrints: however a credential is formatted, logged or
// marshalled, its token does not appear; only Reveal gives it.
func TestCredentialNeverPrints(t *testing.T) {
	const tok = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LWNhbGxlcg.c2ln"
	c := Credential{token: tok}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "cred", c, "in", struct{ C Credential }{c})
	j, _ := json.Marshal(map[string]any{"c": c})
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s %q", c, c, c, c, c), logged.String(), string(j)} {
		if strings.Contains(out, "c2VjcmV0") {
			t.Errorf("the token printed: %s", out)
		}
	}
	if c.Reveal() != tok {
		t.Error("Reveal does not give the token")
	}
}

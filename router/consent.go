package router

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/oauth"
)

// Consent: a request whose upstream needs its caller's authorization (an
// OAuth client of Manifold's has no token for the caller, or not the scope
// the server asks) is answered input_required with one URL-mode
// elicitation: the authorization URL, for the caller's user to open. The
// requestState is Manifold's, sealed and bound to the caller as a held
// call's is; the retry that carries it (with the user's accept) runs the
// request again, which then finds the token the callback stored. Nothing
// is held meanwhile: the user takes the time they take.

// consentPrefix marks a requestState of a consent.
const consentPrefix = "manifold.consent."

// consentKey names the one input request of a consent.
const consentKey = "manifold.authorize"

// consentTTL bounds how long a consent's requestState may be retried (a
// variable for the test that waits it out).
var consentTTL = 15 * time.Minute

// consenting reports whether req is the retry of a consent.
func consenting(req *mcp.Request) bool {
	return strings.HasPrefix(req.Params.String("requestState"), consentPrefix)
}

// askConsent answers req, which needs cr's consent: input_required with the
// authorization URL, if the caller can be asked to open one; otherwise an
// error that names it.
func (hs *holds) askConsent(ctx context.Context, req *mcp.Request, cr *oauth.ConsentRequired) (json.RawMessage, error) {
	link, message := cr.Consent()
	if !req.Declares("elicitation", "url") {
		return nil, &linkError{jsonrpc.Errorf(jsonrpc.CodeMissingCapability, "%s Open %s, then send the request again (the client did not declare elicitation.url, so it cannot be asked)", message, link).
			WithData(map[string]any{"requiredCapabilities": map[string]any{"elicitation": map[string]any{"url": map[string]any{}}}, "url": link, "upstream": cr.Upstream, "message": message})}
	}
	res := jsonrpc.Object{}
	_ = res.Set("resultType", mcp.ResultTypeInputRequired)
	_ = res.Set("inputRequests", map[string]any{consentKey: map[string]any{
		"method": "elicitation/create",
		"params": map[string]any{"mode": "url", "url": link, "message": message},
	}})
	_ = res.Set("requestState", hs.sealConsent(hs.ownerOf(ctx, req), cr.Upstream))
	return res.Marshal(), nil
}

// resumeConsent checks a consent's retry (sealed by this Manifold, for this
// caller, not expired, accepted by the user) and returns the request to run
// again, without the consent's members.
func (hs *holds) resumeConsent(ctx context.Context, req *mcp.Request) (*mcp.Request, error) {
	upstream, err := hs.openConsent(req.Params.String("requestState"), hs.ownerOf(ctx, req))
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "requestState: %v", err)
	}
	responses, _ := req.Params.Object("inputResponses")
	var answer struct {
		Action string `json:"action"`
	}
	if err := json.Unmarshal(responses[consentKey], &answer); err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "inputResponses must answer %q", consentKey)
	}
	if answer.Action != "accept" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "the user did not authorize Manifold to use %s (%s)", upstream, answer.Action).
			WithData(map[string]string{"upstream": upstream})
	}
	sub := *req
	sub.Params = req.Params.Clone()
	delete(sub.Params, "requestState")
	delete(sub.Params, "inputResponses")
	// Not the shape of the bytes that came (a retry, whose checks above
	// must run each time it comes): a plan made for it would replay the
	// answer to those bytes past the consent's expiry.
	sub.Shape = nil
	return &sub, nil
}

// sealConsent makes the requestState of a consent for owner.
func (hs *holds) sealConsent(owner, upstream string) string {
	exp := strconv.FormatInt(time.Now().Add(consentTTL).Unix(), 10)
	return hs.sealFields(consentPrefix, owner, upstream, exp)
}

func (hs *holds) openConsent(state, owner string) (upstream string, err error) {
	parts, err := hs.openFields(state, consentPrefix, 3)
	if err != nil {
		return "", err
	}
	if !hmac.Equal([]byte(parts[0]), []byte(owner)) {
		return "", fmt.Errorf("issued to another caller")
	}
	if exp, _ := strconv.ParseInt(parts[2], 10, 64); time.Now().Unix() > exp {
		return "", fmt.Errorf("the consent expired; send the request again")
	}
	return parts[1], nil
}

// linkError is a consent the caller cannot be asked for, told in an error
// whose message and data hold the authorization link. The link carries
// live state (whoever holds it can complete the consent as the caller), so
// it is for the caller alone: what records the error (a span's status,
// Traced) records redacted() instead.
type linkError struct{ rpc *jsonrpc.Error }

func (e *linkError) Error() string { return e.rpc.Error() }
func (e *linkError) Unwrap() error { return e.rpc }

// redacted is the error without the link.
func (e *linkError) redacted() *jsonrpc.Error {
	return &jsonrpc.Error{Code: e.rpc.Code, Message: "the caller must open an authorization link (not recorded) to consent"}
}

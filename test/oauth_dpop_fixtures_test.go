package test

import (
	"crypto"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

// dpopServer makes an authServer require DPoP (RFC 9449), checked as a
// server checks it (§4.3): one proof per request, of type dpop+jwt, signed
// with an asymmetric algorithm by the public key in its header, for this
// method and URL, issued within a minute, its jti never seen before, with
// the server's nonce when it has one, and (toward the resource) the hash
// of the token it goes with, a token bound to that key (§6, cnf.jkt as a
// thumbprint). Refresh tokens are bound to the key too (§5, a public
// client's). A proof without the nonce gets the nonce challenge (§8, §9).
type dpopServer struct {
	mu       sync.Mutex
	nonce    string            // required in every proof when set
	jtis     map[string]bool   // the proofs seen
	bound    map[string]string // token (access or refresh) → the thumbprint of its key
	proofs   int               // the valid proofs
	nonces   map[string]int    // nonce challenges, by where: "token", "resource"
	failures []string          // what was wrong with the proofs refused
	// inMetadata makes the resource say it requires DPoP in its metadata
	// (dpop_bound_access_tokens_required), its challenge being Bearer's;
	// algs are the algorithms the authorization server lists, if any.
	inMetadata bool
	algs       []string
}

func newDPoPServer(nonce string) *dpopServer {
	return &dpopServer{nonce: nonce, jtis: map[string]bool{}, bound: map[string]string{}, nonces: map[string]int{}}
}

var errNeedsNonce = errors.New("the proof has not the server's nonce")

// proofClaims are the claims of a DPoP proof.
type proofClaims struct {
	JTI   string `json:"jti"`
	HTM   string `json:"htm"`
	HTU   string `json:"htu"`
	IAT   int64  `json:"iat"`
	ATH   string `json:"ath"`
	Nonce string `json:"nonce"`
}

// check verifies r's proof for htu and (toward the resource) token, and
// returns the thumbprint of its key.
func (d *dpopServer) check(r *http.Request, htu, token string) (jkt string, err error) {
	proofs := r.Header.Values("DPoP")
	if len(proofs) != 1 || strings.Contains(proofs[0], ",") {
		return "", fmt.Errorf("%d DPoP headers", len(proofs))
	}
	msg, err := jws.Parse([]byte(proofs[0]))
	if err != nil || len(msg.Signatures()) != 1 {
		return "", fmt.Errorf("not a compact JWS: %v", err)
	}
	h := msg.Signatures()[0].ProtectedHeaders()
	typ, _ := h.Type()
	alg, _ := h.Algorithm()
	key, hasKey := h.JWK()
	switch {
	case typ != "dpop+jwt":
		return "", fmt.Errorf("typ %q", typ)
	case !hasKey:
		return "", errors.New("no jwk in the header")
	case alg == jwa.NoSignature() || strings.HasPrefix(alg.String(), "HS"):
		return "", fmt.Errorf("alg %s is not asymmetric", alg)
	}
	if private, _ := jwk.IsPrivateKey(key); private {
		return "", errors.New("the jwk is a private key")
	}
	payload, err := jws.Verify([]byte(proofs[0]), jws.WithKey(alg, key))
	if err != nil {
		return "", fmt.Errorf("signature: %v", err)
	}
	var c proofClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return "", fmt.Errorf("claims: %v", err)
	}
	if err := d.checkClaims(c, r.Method, htu, token); err != nil {
		return "", err
	}
	tp, err := key.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

func (d *dpopServer) checkClaims(c proofClaims, method, htu, token string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ath := ""
	if token != "" {
		sum := sha256.Sum256([]byte(token))
		ath = base64.RawURLEncoding.EncodeToString(sum[:])
	}
	age := time.Since(time.Unix(c.IAT, 0))
	switch {
	case c.JTI == "" || d.jtis[c.JTI]:
		return fmt.Errorf("jti %q is empty or replayed", c.JTI)
	case c.HTM != method || c.HTU != htu:
		return fmt.Errorf("htm %s htu %s, not %s %s", c.HTM, c.HTU, method, htu)
	case age > time.Minute || age < -time.Minute:
		return fmt.Errorf("iat %s off", age)
	case c.ATH != ath:
		return fmt.Errorf("ath %q, not %q", c.ATH, ath)
	}
	d.jtis[c.JTI] = true
	if d.nonce != "" && c.Nonce != d.nonce {
		return errNeedsNonce
	}
	d.proofs++
	return nil
}

// tokenProof checks the proof of a token request: ok false when it
// answered it (the nonce challenge, or a refusal). jkt is "" for a server
// without DPoP.
func (d *dpopServer) tokenProof(w http.ResponseWriter, r *http.Request, htu string) (jkt string, ok bool) {
	if d == nil {
		return "", true
	}
	jkt, err := d.check(r, htu, "")
	if err != nil {
		d.refused("token", err, w, func() {
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, map[string]string{"error": "use_dpop_nonce"})
		}, func() {
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, map[string]string{"error": "invalid_dpop_proof"})
		})
		return "", false
	}
	return jkt, true
}

// resourceProof returns the token of a request to the resource, its
// proof checked; ok false when it answered it.
func (d *dpopServer) resourceProof(w http.ResponseWriter, r *http.Request, htu, metadata string) (token string, ok bool) {
	if d == nil {
		return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), true
	}
	challenge := func(e string) func() {
		return func() {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`DPoP error=%q, algs="ES256", resource_metadata=%q`, e, metadata))
			http.Error(w, e, http.StatusUnauthorized)
		}
	}
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if scheme != "DPoP" || token == "" {
		if scheme != "" {
			d.fail(fmt.Errorf("the token came with scheme %q", scheme))
		}
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`DPoP algs="ES256", resource_metadata=%q`, metadata))
		if d.inMetadata {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata=%q`, metadata))
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return "", false
	}
	jkt, err := d.check(r, htu, token)
	if err != nil {
		d.refused("resource", err, w, challenge("use_dpop_nonce"), challenge("invalid_dpop_proof"))
		return "", false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bound[token] != jkt {
		challenge("invalid_token")()
		return "", false
	}
	return token, true
}

// refused answers a proof refused for err: with the nonce challenge, or
// else as invalid, recorded.
func (d *dpopServer) refused(where string, err error, w http.ResponseWriter, needsNonce, invalid func()) {
	if errors.Is(err, errNeedsNonce) {
		d.mu.Lock()
		d.nonces[where]++
		nonce := d.nonce
		d.mu.Unlock()
		w.Header().Set("DPoP-Nonce", nonce)
		needsNonce()
		return
	}
	d.fail(fmt.Errorf("%s: %w", where, err))
	invalid()
}

func (d *dpopServer) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failures = append(d.failures, err.Error())
}

// bind binds tokens to the key of thumbprint jkt, and returns the token
// type to answer: DPoP for a bound token.
func (d *dpopServer) bind(jkt string, tokens ...string) string {
	if d == nil || jkt == "" {
		return "Bearer"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range tokens {
		d.bound[t] = jkt
	}
	return "DPoP"
}

// boundTo reports whether a refresh token may be used with the key of
// thumbprint jkt: the one it was bound to, if any.
func (d *dpopServer) boundTo(token, jkt string) bool {
	if d == nil {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.bound[token] == jkt
}

func (d *dpopServer) report() (proofs int, nonces map[string]int, failures []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := map[string]int{}
	for k, v := range d.nonces {
		n[k] = v
	}
	return d.proofs, n, append([]string(nil), d.failures...)
}

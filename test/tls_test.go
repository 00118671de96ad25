package test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testCA is a certificate authority made by the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	File string // its certificate, PEM
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, pool: x509.NewCertPool(), File: filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".pem")}
	ca.pool.AddCert(cert)
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// issue signs a certificate for subject (a server's for 127.0.0.1 when
// server is set, else a client's) and returns it as tls.Certificate, after
// writing NAME.pem and NAME-key.pem into dir when dir is set.
func (ca *testCA) issue(t *testing.T, dir, name string, subject pkix.Name, server bool) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: subject,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	if dir != "" {
		// The key first: a reader that sees the new certificate must find
		// its key.
		writePEM(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", kb)
		writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startTLS runs `manifold serve` on yamlText after a listen line, and
// returns the https URL of /mcp.
func startTLS(t *testing.T, yamlText string) string {
	t.Helper()
	port := freePort(t)
	path := filepath.Join(t.TempDir(), "manifold.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\n", port)+yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(manifoldBin, "serve", "--config", path)
	cmd.Stderr = testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	waitListening(t, port)
	return fmt.Sprintf("https://127.0.0.1:%d/mcp", port)
}

// tlsClient trusts ca and presents cert (if any) and speaks at most max.
func tlsClient(ca *testCA, cert *tls.Certificate, max uint16) *http.Client {
	c := &tls.Config{RootCAs: ca.pool, MaxVersion: max}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: c}, Timeout: 10 * time.Second}
}

// ping sends server/discover with client and returns its status and the
// server's certificate common name, or the error.
func ping(c *http.Client, url string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(rpcBody(1, "server/discover", "")))
	req.Header = headers("server/discover", "")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	resp.Body.Close()
	cn := ""
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		cn = resp.TLS.PeerCertificates[0].Subject.CommonName
	}
	return resp.StatusCode, cn, nil
}

// The listener speaks TLS 1.2 and later only, refuses plain HTTP, and
// serves a renewed certificate as soon as its files change, without a
// restart.
func TestTLSListener(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "Manifold Test CA")
	ca.issue(t, dir, "server", pkix.Name{CommonName: "server-1"}, true)
	up := modernSDK(t, newHintedServer().Server)
	admin := freePort(t)
	url := startTLS(t, fmt.Sprintf("admin: {listen: 127.0.0.1:%d}\ntls: {cert_file: %q, key_file: %q}\nupstreams:", admin, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))+
		httpUpstreamYAML("h", up.URL))
	if s, cn, err := ping(tlsClient(ca, nil, 0), url); err != nil || s != 200 || cn != "server-1" {
		t.Fatalf("ping over TLS: %d %q %v", s, cn, err)
	}
	// The admin listener speaks TLS too.
	waitListening(t, admin)
	resp, err := tlsClient(ca, nil, 0).Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", admin))
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("admin /healthz over TLS: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if _, _, err := ping(tlsClient(ca, nil, tls.VersionTLS11), url); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	if s, _, err := ping(http.DefaultClient, strings.Replace(url, "https:", "http:", 1)); err == nil && s != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS listener: HTTP %d", s)
	}
	ca.issue(t, dir, "server", pkix.Name{CommonName: "server-2"}, true)
	// A renewal comes later than the first issue; here it comes within the
	// same second, which some file systems cannot tell apart: date the new
	// files a few seconds on, as a renewal would be.
	later := time.Now().Add(3 * time.Second)
	for _, f := range []string{"server.pem", "server-key.pem"} {
		if err := os.Chtimes(filepath.Join(dir, f), later, later); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, func() error {
		// A new connection each time: the renewal applies to handshakes.
		_, cn, err := ping(tlsClient(ca, nil, 0), url)
		if err != nil || cn != "server-2" {
			return fmt.Errorf("certificate %q, %v", cn, err)
		}
		return nil
	})
}

// With a client CA, a client without a certificate, or with one of another
// CA, is refused at the handshake. With principal_from: client_cert, the
// certificate's subject is the principal: a renewed certificate of alice
// shares her private entries, bob's does not, and access rules match the
// certificate's organization.
func TestMutualTLSPrincipal(t *testing.T) {
	dir := t.TempDir()
	ca, other := newTestCA(t, dir, "Manifold Test CA"), newTestCA(t, dir, "Other CA")
	ca.issue(t, dir, "server", pkix.Name{CommonName: "server"}, true)
	h, vault := newHintedServer(), newSDKServer("vault", sdkOptions{resources: 1})
	up, vaultUp := modernSDK(t, h.Server), modernSDK(t, vault)
	url := startTLS(t, fmt.Sprintf("tls: {cert_file: %q, key_file: %q, client_ca_file: %q}\nauth: {principal_from: client_cert}\nupstreams:",
		filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), ca.File)+
		httpUpstreamYAML("h", up.URL)+httpUpstreamYAML("vault", vaultUp.URL, "access: [{claim: o, values: [eng]}]"))
	alice := ca.issue(t, "", "", pkix.Name{CommonName: "alice", Organization: []string{"eng"}}, false)
	alice2 := ca.issue(t, "", "", pkix.Name{CommonName: "alice", Organization: []string{"eng"}}, false)
	bob := ca.issue(t, "", "", pkix.Name{CommonName: "bob", Organization: []string{"sales"}}, false)
	forged := other.issue(t, "", "", pkix.Name{CommonName: "alice", Organization: []string{"eng"}}, false)
	for name, c := range map[string]*http.Client{"no certificate": tlsClient(ca, nil, 0), "another CA's": tlsClient(ca, &forged, 0)} {
		if s, _, err := ping(c, url); err == nil {
			t.Errorf("%s: served, HTTP %d", name, s)
		}
	}
	read := func(cert tls.Certificate, uri string) *rawResponse {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(rpcBody(1, "resources/read", fmt.Sprintf(`"uri":%q`, uri))))
		req.Header = headers("resources/read", uri)
		resp, err := tlsClient(ca, &cert, 0).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return decodeRaw(t, resp)
	}
	for _, c := range []tls.Certificate{alice, alice2, bob} {
		if r := read(c, "h+test://priv/mtls"); r.Status != 200 || r.Error != nil {
			t.Fatalf("read: HTTP %d %s", r.Status, r.Body)
		}
	}
	if n := h.count("test://priv/mtls"); n != 2 {
		t.Errorf("upstream calls %d for alice, alice renewed and bob; want 2", n)
	}
	if r := read(bob, "vault+test://vault/0"); r.Error == nil {
		t.Errorf("bob (o=sales) read the eng-only upstream: %s", r.Body)
	}
	if r := read(alice, "vault+test://vault/0"); r.Error != nil {
		t.Errorf("alice (o=eng): %s", r.Body)
	}
}

// With two CAs trusted, the same subject from each is two principals: one
// CA cannot issue a certificate that is the other's user.
func TestClientCertPrincipalIncludesIssuer(t *testing.T) {
	dir := t.TempDir()
	ca, partner := newTestCA(t, dir, "Manifold Test CA"), newTestCA(t, dir, "Partner CA")
	ca.issue(t, dir, "server", pkix.Name{CommonName: "server"}, true)
	a, _ := os.ReadFile(ca.File)
	b, _ := os.ReadFile(partner.File)
	bundle := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(bundle, append(a, b...), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHintedServer()
	up := modernSDK(t, h.Server)
	url := startTLS(t, fmt.Sprintf("tls: {cert_file: %q, key_file: %q, client_ca_file: %q}\nauth: {principal_from: client_cert}\nupstreams:",
		filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), bundle)+httpUpstreamYAML("h", up.URL))
	for _, issuer := range []*testCA{ca, partner} {
		cert := issuer.issue(t, "", "", pkix.Name{CommonName: "alice", Organization: []string{"eng"}}, false)
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(rpcBody(1, "resources/read", `"uri":"h+test://priv/issuer"`)))
		req.Header = headers("resources/read", "h+test://priv/issuer")
		cl := tlsClient(ca, &cert, 0)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if r := decodeRaw(t, resp); r.Error != nil {
			t.Fatalf("read: %s", r.Body)
		}
	}
	if n := h.count("test://priv/issuer"); n != 2 {
		t.Errorf("alice of two CAs: %d upstream calls, want 2 (two principals)", n)
	}
}

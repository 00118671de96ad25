// Package servertls is the TLS of Manifold's listeners: TLS 1.2 at least,
// the certificate and key read again when their files change (a renewal
// needs no restart), and, with a client CA, mutual TLS.
//
// Each handshake gets its configuration from Files, which looks at the
// files' modification times at most once a second and loads them again when
// they moved. A pair that does not load (a renewal caught half written) is
// logged and the previous one kept, so a bad deploy never takes the
// listener down.
package servertls

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Options name the PEM files.
type Options struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, requires every client to present a
	// certificate signed by one of its CAs.
	ClientCAFile string
}

// checkEvery bounds how often the files are looked at.
const checkEvery = time.Second

// Files serves the current certificate. It is safe for concurrent use.
type Files struct {
	o   Options
	log *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	pool    *x509.CertPool
	stamp   string // the files' modification times when loaded
	checked time.Time
}

// Load reads the files once; an error here is a configuration error.
func Load(o Options, log *slog.Logger) (*Files, error) {
	f := &Files{o: o, log: log}
	stamp, err := f.stampNow()
	if err != nil {
		return nil, err
	}
	if err := f.load(stamp); err != nil {
		return nil, err
	}
	return f, nil
}

// Config is the tls.Config of a listener.
func (f *Files) Config() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: f.forClient,
		// ServeTLS wants a certificate source of its own.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return f.current().cert, nil },
	}
}

type snapshot struct {
	cert *tls.Certificate
	pool *x509.CertPool
}

func (f *Files) forClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	s := f.current()
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*s.cert}, NextProtos: []string{"h2", "http/1.1"}}
	if s.pool != nil {
		c.ClientCAs, c.ClientAuth = s.pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// current returns the loaded pair, loading the files again first when
// they changed (looked at once a second at most).
func (f *Files) current() snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.checked) >= checkEvery {
		f.checked = time.Now()
		if stamp, err := f.stampNow(); err == nil && stamp != f.stamp {
			if err := f.load(stamp); err != nil {
				f.log.Error("tls: the new certificate files do not load; keeping the current ones", "err", err)
			} else {
				f.log.Info("tls: certificate files reloaded", "cert", f.o.CertFile)
			}
		}
	}
	return snapshot{f.cert, f.pool}
}

func (f *Files) stampNow() (string, error) {
	stamp := ""
	for _, name := range []string{f.o.CertFile, f.o.KeyFile, f.o.ClientCAFile} {
		if name == "" {
			continue
		}
		fi, err := os.Stat(name)
		if err != nil {
			return "", fmt.Errorf("tls: %w", err)
		}
		stamp += fi.ModTime().String() + fmt.Sprint(fi.Size()) + "|"
	}
	return stamp, nil
}

// load reads the files; called with mu held, or before f is shared.
func (f *Files) load(stamp string) error {
	cert, err := tls.LoadX509KeyPair(f.o.CertFile, f.o.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: cert_file and key_file: %w", err)
	}
	var pool *x509.CertPool
	if f.o.ClientCAFile != "" {
		pem, err := os.ReadFile(f.o.ClientCAFile)
		if err != nil {
			return fmt.Errorf("tls: client_ca_file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("tls: client_ca_file: no certificate found in %s", f.o.ClientCAFile)
		}
	}
	f.cert, f.pool, f.stamp = &cert, pool, stamp
	return nil
}

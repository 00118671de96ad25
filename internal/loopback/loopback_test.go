package loopback

import (
	"net/url"
	"testing"
)

func TestHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.8.9.10": true, "::1": true,
		"localhost.example.com": false, "10.0.0.1": false, "0.0.0.0": false, "example.com": false, "": false, "[::1]": false,
	} {
		if got := Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestSecure(t *testing.T) {
	for raw, want := range map[string]bool{
		"https://as.example.com/token": true, "http://127.0.0.1:8080/x": true, "http://[::1]/x": true, "http://localhost/x": true,
		"http://as.example.com/token": false, "http://10.0.0.1/x": false, "javascript:alert(1)": false, "ftp://localhost/x": false,
	} {
		u, _ := url.Parse(raw)
		if got := Secure(u); got != want {
			t.Errorf("Secure(%s) = %v, want %v", raw, got, want)
		}
	}
}

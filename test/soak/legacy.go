package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// legacyCaller is one 2025-11-25 session, on raw HTTP.
type legacyCaller struct {
	l     *load
	token string
	sid   string
}

const legacyVersion = "2025-11-25"

// modernOnly are members a legacy caller must never be sent.
var modernOnly = []string{`"resultType"`, `"ttlMs"`, `"cacheScope"`, `"inputRequests"`}

func (s *legacyCaller) header() http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Authorization": {"Bearer " + s.token}}
	if s.sid != "" {
		h.Set("Mcp-Session-Id", s.sid)
		h.Set("Mcp-Protocol-Version", legacyVersion)
	}
	return h
}

// request sends one request on the session and checks the envelope and
// the legacy shape of the result.
func (s *legacyCaller) request(ctx context.Context, r *replica, method, params string) (http.Header, json.RawMessage, error) {
	s.l.t.requests.Add(1)
	id := nextID.Add(1)
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
	h, res, err := post(ctx, r.mcp, s.header(), body, id)
	if err != nil {
		return h, nil, err
	}
	for _, m := range modernOnly {
		if strings.Contains(string(res), m) {
			return h, nil, wrongf("a legacy %s answer carries %s: %.200s", method, m, res)
		}
	}
	return h, res, nil
}

func (s *legacyCaller) initialize(ctx context.Context, r *replica) error {
	h, res, err := s.request(ctx, r, "initialize", `{"protocolVersion":"`+legacyVersion+`","capabilities":{},"clientInfo":{"name":"soak-legacy","version":"1"}}`)
	if err != nil {
		return err
	}
	var hello struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if json.Unmarshal(res, &hello) != nil || hello.ProtocolVersion != legacyVersion || h.Get("Mcp-Session-Id") == "" {
		return wrongf("initialize answered %.200s with session %q", res, h.Get("Mcp-Session-Id"))
	}
	s.sid = h.Get("Mcp-Session-Id")
	return s.notify(ctx, r, "notifications/initialized")
}

func (s *legacyCaller) notify(ctx context.Context, r *replica, method string) error {
	s.l.t.requests.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.mcp, strings.NewReader(`{"jsonrpc":"2.0","method":"`+method+`"}`))
	if err != nil {
		return err
	}
	req.Header = s.header()
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("%s: HTTP %d", method, resp.StatusCode)
	}
	return nil
}

// expect sends a request whose result holds the one text want.
func (s *legacyCaller) expect(ctx context.Context, r *replica, method, params, want string) error {
	_, res, err := s.request(ctx, r, method, params)
	if err != nil {
		return err
	}
	if err := expectText(res, want); err != nil {
		return wrongf("legacy %s: %v", method, err)
	}
	return nil
}

// end DELETEs the session.
func (s *legacyCaller) end(ctx context.Context, r *replica) error {
	s.l.t.requests.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, r.mcp, nil)
	if err != nil {
		return err
	}
	req.Header = s.header()
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("DELETE: HTTP %d", resp.StatusCode)
	}
	return nil
}

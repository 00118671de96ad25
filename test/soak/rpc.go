package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// An answer is checked twice: its envelope (valid JSON-RPC 2.0, its own
// id, a result or an error) and its content. What is merely unavailable
// (a transport error, a JSON-RPC error while something is down) is an
// error; what is malformed, misaddressed or not what the upstream holds is
// wrong, which a soak must never see.

// errWrong marks an outcome that is wrong, not merely failed.
type errWrong struct{ msg string }

func (e *errWrong) Error() string { return e.msg }

func wrongf(format string, args ...any) error { return &errWrong{fmt.Sprintf(format, args...)} }

func isWrong(err error) bool {
	var w *errWrong
	return errors.As(err, &w)
}

// rpcError is a JSON-RPC error answer: a failure, not a wrong answer.
type rpcError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("JSON-RPC %d: %s", e.Code, e.Message) }

var nextID atomic.Int64

const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"soak","version":"1"}}`

var httpClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}

// call sends a modern request and returns its checked result.
func call(ctx context.Context, url, token, method, name, params string) (json.RawMessage, error) {
	id := nextID.Add(1)
	if params != "" {
		params += ","
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s%s}}`, id, method, params, modernMeta)
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"},
		"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {method}, "Authorization": {"Bearer " + token}}
	if name != "" {
		h.Set("Mcp-Name", name)
	}
	_, res, err := post(ctx, url, h, body, id)
	return res, err
}

// post sends body and checks the answer to request id, JSON or an event
// stream ending with it; it returns the HTTP header too.
func post(ctx context.Context, url string, h http.Header, body string, id int64) (http.Header, json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header = h
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.Header, nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b = lastData(b)
	}
	// Whatever the status, Manifold answers a request with a JSON-RPC body.
	res, err := envelope(b, id)
	if isWrong(err) {
		err = wrongf("HTTP %d: %v", resp.StatusCode, err)
	}
	return resp.Header, res, err
}

// lastData is the data of an event stream's last event.
func lastData(b []byte) []byte {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
			last = append([]byte(nil), d...)
		}
	}
	return last
}

// envelope checks b is a JSON-RPC 2.0 response to id, and returns its
// result, or its error as an *rpcError.
func envelope(b []byte, id int64) (json.RawMessage, error) {
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *rpcError       `json:"error"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, wrongf("not JSON-RPC: %v: %.200q", err, b)
	}
	switch {
	case m.JSONRPC != "2.0":
		return nil, wrongf("jsonrpc %q: %.200s", m.JSONRPC, b)
	case string(m.ID) != fmt.Sprint(id):
		return nil, wrongf("answer to id %s, asked %d: %.200s", m.ID, id, b)
	case (m.Error == nil) == (len(m.Result) == 0):
		return nil, wrongf("neither or both of result and error: %.200s", b)
	case m.Error != nil:
		return nil, m.Error
	}
	return m.Result, nil
}

// texts are the texts of a result's contents (a read), content (a tool) or
// messages (a prompt), whichever it has.
func texts(res json.RawMessage) []string {
	var r struct {
		Contents []struct{ Text string } `json:"contents"`
		Content  []struct{ Text string } `json:"content"`
		Messages []struct {
			Content struct{ Text string } `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(res, &r)
	var out []string
	for _, c := range r.Contents {
		out = append(out, c.Text)
	}
	for _, c := range r.Content {
		out = append(out, c.Text)
	}
	for _, m := range r.Messages {
		out = append(out, m.Content.Text)
	}
	return out
}

// expectText checks a result holds exactly the one text want.
func expectText(res json.RawMessage, want string) error {
	if got := texts(res); len(got) != 1 || got[0] != want {
		return wrongf("got %q, want %q", got, want)
	}
	return nil
}

package upstream

import (
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/manifold-mcp/manifold/internal/mcp"
	"github.com/manifold-mcp/manifold/internal/mcptrace"
	"github.com/manifold-mcp/manifold/upstream/transport"
)

// attrUpstream names the configured upstream a client span calls: the
// conventions have server.address, not Manifold's name for the server.
const attrUpstream = attribute.Key("manifold.upstream")

// describeCall sets what the client span of a call says: the request in
// the server's own names (internal/mcptrace), the upstream, the revision
// spoken, the legacy session's digest, and where the server is.
func (x *exchanger) describeCall(span trace.Span, s *session, req *mcp.Request) {
	mcptrace.Describe(span, req.Method, req.Params)
	span.SetAttributes(attrUpstream.String(x.name), mcptrace.Version(s.Version))
	if s.id != "" {
		span.SetAttributes(mcptrace.Session(s.id))
	}
	span.SetAttributes(x.peer...)
}

// describeReply records how a call ended: the server's answer, or the
// failure to get one.
func describeReply(span trace.Span, method string, msg *transport.Reply, err error) {
	switch {
	case err != nil:
		mcptrace.Failed(span, err)
	case msg != nil && msg.Message != nil:
		mcptrace.Answered(span, method, msg.Result, msg.Error)
	}
}

// peerAttributes are the network.* and server.* attributes of the
// upstream's client spans: a child's pipe, or the HTTP server's address.
func peerAttributes(o Options) []attribute.KeyValue {
	if len(o.Command) > 0 {
		return []attribute.KeyValue{semconv.NetworkTransportPipe}
	}
	attrs := []attribute.KeyValue{semconv.NetworkTransportTCP}
	target, err := url.Parse(o.URL)
	if err != nil {
		return attrs
	}
	host, port := target.Hostname(), target.Port() // as configured: no lookup
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[target.Scheme]
	}
	attrs = append(attrs, semconv.ServerAddressKey.String(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPortKey.Int(p))
	}
	return attrs
}

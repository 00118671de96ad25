package oauth

import "context"

type probingKey struct{}

// Probing marks ctx as a health probe of the upstream, made for no
// principal: its request goes with no token, and the server's answer (a
// protected server's 401 challenge) comes back as it is, never as a
// consent to ask for.
func Probing(ctx context.Context) context.Context {
	return context.WithValue(ctx, probingKey{}, true)
}

func probing(ctx context.Context) bool {
	p, _ := ctx.Value(probingKey{}).(bool)
	return p
}

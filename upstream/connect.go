package upstream

import (
	"fmt"

	"github.com/manifold-mcp/manifold/internal/clip"
)

// AsksConsent reports whether the server is reached with each caller's
// own OAuth grant, which its user must give first (OAuth mode user).
func (u *Upstream) AsksConsent() bool {
	return u.o.Authorize != nil && u.o.PerPrincipal && len(u.o.Command) == 0
}

// maxLearnt bounds what the server's own account of itself adds to a
// description: it is the server's to choose, and every caller is shown it.
const maxLearnt = 512

// ConnectDescription is what a caller who has not authorized the server
// is told of it: the operator's description, else the server's name and
// instructions as it gave them to nobody's credential, else a sentence
// naming it.
func (u *Upstream) ConnectDescription() string {
	if u.o.Description != "" {
		return u.o.Description
	}
	info := u.prober.learnt()
	name, instructions := clip.Text(info.ServerInfo.Name, 100), clip.Text(info.Instructions, maxLearnt)
	what := name
	switch {
	case name != "" && instructions != "":
		what = name + ": " + instructions
	case name == "":
		what = instructions
	}
	if what == "" {
		return fmt.Sprintf("Connect your %s account to Manifold. Call this tool to authorize it; its own tools are listed once you have.", u.o.Name)
	}
	return fmt.Sprintf("Connect your %s account (%s). Call this tool to authorize it; its own tools are listed once you have.", u.o.Name, what)
}

package frontend

import (
	"testing"

	"github.com/manifold-mcp/manifold/internal/jsonrpc"
)

// Replicas share a legacy session (its store in Redis), and a caller's
// answer goes to whichever replica its POST reaches, which hands it to the
// question it names if that question waits there, else passes it on. So
// the questions two replicas put to one session never share an id: an
// answer (an "accept") meant for one replica's question is never taken by
// the other's, which asked in the same moment.
func TestQuestionIDsDifferAcrossReplicas(t *testing.T) {
	var a, b askBook // each replica's
	idA, fromA, doneA := a.open("s")
	defer doneA()
	idB, _, doneB := b.open("s")
	defer doneB()
	if string(idA) == string(idB) {
		t.Fatalf("both replicas asked %s", idA)
	}
	answer := &jsonrpc.Message{JSONRPC: jsonrpc.Version, ID: idA, Result: []byte(`{"action":"accept"}`)}
	if b.answer("s", answer) {
		t.Fatal("replica b took the answer to replica a's question")
	}
	if !a.answer("s", answer) {
		t.Fatal("replica a did not take the answer to its own question")
	}
	if got := <-fromA; string(got.ID) != string(idA) {
		t.Errorf("a's question got %s", got.ID)
	}
}

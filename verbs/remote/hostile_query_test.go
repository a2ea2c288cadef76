package remote

import (
	"errors"
	"testing"

	"github.com/xrnic/xrnic/nic/attach/server"
	"github.com/xrnic/xrnic/verbs"
)

// QUERY_QP of a handle that names no QP of the process's is ENOENT, and the
// session goes on. Before, the daemon's reply was an empty datagram: the
// failed query's nil *QPAttr went into the reply's payload (an interface
// holding a nil pointer is not nil), Encode refused it, and the daemon sent
// the nil message Encode returned. An empty datagram reads as the socket's
// end: the client took the daemon for gone and every later call failed.
func TestHostileQueryQPBadHandle(t *testing.T) {
	r := newRig(t, server.Config{})
	d := r.dial(t)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&QP{pd: pd, h: 999}).Query(); !errors.Is(err, verbs.ErrNotFound) {
		t.Errorf("QUERY_QP of a handle that names nothing: %v, want ErrNotFound", err)
	}
	if _, err := d.AllocPD(); err != nil {
		t.Fatalf("the session after it: %v", err)
	}
}

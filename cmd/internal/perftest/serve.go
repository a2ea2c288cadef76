// One side of a test over a device shared with other sessions: the entry point of
// the daemon's bench server (cmd/xrnic), and of clients that share a device.

package perftest

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/xrnic/xrnic/verbs"
)

// RunConn runs one side of a test, as Run does once connected, over dev and the
// connection c: the server's after its accept (p.Server()), or the client's
// after its dial. The session's resources (PD, MR, CQs, QPs) are its own and are
// released, and c closed, before RunConn returns; dev is the caller's and stays
// open, so any number of RunConn calls may share it concurrently. name is the
// device as the report's header names it. RunConn does not change p. Cancelling
// ctx ends the session (its QPs flush) and RunConn returns ctx's error.
func RunConn(ctx context.Context, p *Params, out, errw io.Writer, dev *verbs.Device, name string, c net.Conn) error {
	if p.Local {
		c.Close()
		return &usageError{p.Test.Name, errors.New("--local runs both sides: it needs no connection")}
	}
	if p.CommRDMACM {
		c.Close()
		return &usageError{p.Test.Name, errors.New("-z and -R exchange over rdma_cm: this server's exchange is TCP")}
	}
	q := *p
	conn := NewConn(c, !q.Listens())
	if q.ExchangeTimeout > 0 {
		conn.Timeout = q.ExchangeTimeout
	}
	return runConn(ctx, &q, out, errw, dev, func() {}, name, conn)
}

// Op: the completion of an asynchronous control operation.

package engine

import "context"

// Op is a control operation (QP modify or destroy, device close) that the engine
// goroutine executes. Done is closed when it has finished; Err then tells how.
// Safe for concurrent use; an Op is never reused.
type Op struct {
	done chan struct{}
	err  error
}

func newOp() *Op { return &Op{done: make(chan struct{})} }

// doneOp returns an Op that has already finished with err.
func doneOp(err error) *Op {
	o := newOp()
	o.finish(err)
	return o
}

func (o *Op) finish(err error) {
	o.err = err
	close(o.done)
}

// Done returns a channel closed when the operation has finished.
func (o *Op) Done() <-chan struct{} { return o.done }

// Err returns the operation's result once Done is closed, and nil before.
func (o *Op) Err() error {
	select {
	case <-o.done:
		return o.err
	default:
		return nil
	}
}

// Wait blocks until the operation has finished and returns its result.
func (o *Op) Wait() error {
	<-o.done
	return o.err
}

// WaitContext is Wait with a deadline: it returns ctx.Err() if ctx ends first (the
// operation still completes on its own).
func (o *Op) WaitContext(ctx context.Context) error {
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

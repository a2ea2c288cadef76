package o2ib

import "sync"

// pools are an NI's RDMA buffers, in two pools so that no transfer waits for
// a buffer held by one that waits for it: own buffers back the transfers
// this NI starts (a PUT's source, a GET's destination), taken before the
// request goes out; lent buffers back its peers' (a PUT's sink, a GET's
// source). A transfer that holds its own buffer waits only for a lent one,
// and lent ones are held only by transfers whose other side holds its own,
// so every wait ends.
type pools struct {
	mu      sync.Mutex
	own     []int    // free own buffers: slots 0 .. RDMASlots-1
	lend    []int    // free lent buffers: slots RDMASlots .. 2*RDMASlots-1
	starved []*Conn  // connections with a PUT or GET queued for an own buffer
	parked  []parked // peers' requests waiting for a lent buffer
}

// parked is a peer's PUT_REQ or GET_REQ that came when no lent buffer was
// free; it holds a reference on its connection until served.
type parked struct {
	c *Conn
	h hdr
}

func (p *pools) init(n int) {
	for i := range n {
		p.own = append(p.own, i)
		p.lend = append(p.lend, n+i)
	}
}

// takeOwn takes an own buffer for c's next send, or notes c as waiting for
// one (with a reference, dropped when it is woken).
func (ni *NI) takeOwn(c *Conn) (int, bool) {
	p := &ni.pools
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := pop(&p.own); ok {
		return s, true
	}
	if !c.starving {
		c.starving = true
		c.addref()
		p.starved = append(p.starved, c)
	}
	return 0, false
}

// takeLent takes a lent buffer for c's peer's request h, or parks the request.
func (ni *NI) takeLent(c *Conn, h hdr) (int, bool) {
	p := &ni.pools
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := pop(&p.lend); ok {
		return s, true
	}
	c.addref()
	p.parked = append(p.parked, parked{c, h})
	return 0, false
}

// release gives slot s back: a lent buffer to the oldest parked request, an
// own buffer to the connections waiting for one.
func (ni *NI) release(s int) {
	p := &ni.pools
	p.mu.Lock()
	if s >= ni.cfg.RDMASlots {
		if len(p.parked) > 0 {
			r := p.parked[0]
			p.parked[0] = parked{}
			p.parked = p.parked[1:]
			p.mu.Unlock()
			r.c.lendTo(r.h, s)
			r.c.checkSends()
			r.c.decref()
			return
		}
		p.lend = append(p.lend, s)
		p.mu.Unlock()
		return
	}
	p.own = append(p.own, s)
	starved := p.starved
	p.starved = nil
	for _, c := range starved {
		c.starving = false
	}
	p.mu.Unlock()
	for _, c := range starved {
		c.checkSends()
		c.decref()
	}
}

// pop takes the last free slot of a pool.
func pop(pool *[]int) (int, bool) {
	n := len(*pool)
	if n == 0 {
		return 0, false
	}
	s := (*pool)[n-1]
	*pool = (*pool)[:n-1]
	return s, true
}

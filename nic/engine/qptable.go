package engine

// qpTable is an engine's QPs by number: two levels of arrays indexed by the
// QPN's bits, as rxe's pool indexes its QPs by number. A map hashed each
// received frame's destination QPN once it held more than 8 QPs: 72
// instructions a frame at 256 QPs against 35 at one (BenchmarkInstructions).
// Pages of qpPage QPs come and go with the QPs they hold, so an engine holds
// 4 KiB of directory and 2 KiB a page in use. Engine-owned: no locks.
type qpTable struct {
	pages [maxQPN / qpPage]*qpTablePage
}

type qpTablePage struct {
	qps [qpPage]*QP
	n   int // non-nil entries
}

const qpPage = 256

// get returns the QP numbered qpn, or nil: any 24-bit number a frame carries.
func (t *qpTable) get(qpn uint32) *QP {
	if qpn >= maxQPN {
		return nil
	}
	p := t.pages[qpn/qpPage]
	if p == nil {
		return nil
	}
	return p.qps[qpn%qpPage]
}

// put files qp under its number, which newQP gave it below maxQPN.
func (t *qpTable) put(qp *QP) {
	p := t.pages[qp.qpn/qpPage]
	if p == nil {
		p = new(qpTablePage)
		t.pages[qp.qpn/qpPage] = p
	}
	if p.qps[qp.qpn%qpPage] == nil {
		p.n++
	}
	p.qps[qp.qpn%qpPage] = qp
}

// remove takes the QP numbered qpn out, and its page once empty.
func (t *qpTable) remove(qpn uint32) {
	p := t.pages[qpn/qpPage]
	if p == nil || p.qps[qpn%qpPage] == nil {
		return
	}
	p.qps[qpn%qpPage] = nil
	if p.n--; p.n == 0 {
		t.pages[qpn/qpPage] = nil
	}
}

// all calls fn for each QP in the order of their numbers; fn may remove the
// QP it is given.
func (t *qpTable) all(fn func(*QP)) {
	for _, p := range t.pages {
		if p == nil {
			continue
		}
		for i := range p.qps {
			if qp := p.qps[i]; qp != nil {
				fn(qp)
			}
		}
	}
}

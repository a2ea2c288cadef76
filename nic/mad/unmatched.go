package mad

import "encoding/binary"

// Methods and status of the MAD layer's answer to a request no agent takes.
const (
	MethodGet     = 0x01
	MethodSet     = 0x02
	MethodGetResp = 0x81
	// StatusUnsupportedMethodAttr is "the method/attribute combination is
	// not supported" (IBTA 13.4.7, Linux IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB).
	StatusUnsupportedMethodAttr = 0x000C

	classSubnLIDRouted      = 0x01 // SMPs: QP0's, never answered on QP1
	classSubnDirectedRouted = 0x81
	attrClassPortInfo       = 0x0001
)

// UnmatchedResponse writes into resp the answer the MAD layer gives a Get or
// Set that no agent on QP1 takes, as Linux's generate_unmatched_resp (ib_mad,
// which answers for rxe): the MAD back as GetResp with status "unsupported
// method/attribute". The CM takes only Send(), so every Get and Set on QP1 is
// unmatched here (ClassPortInfo of the CM's class among them). False, resp
// untouched, for any other MAD, which gets no answer.
func UnmatchedResponse(req, resp []byte) bool {
	if len(req) != Size || len(resp) < Size || req[0] != BaseVersion ||
		req[1] == classSubnLIDRouted || req[1] == classSubnDirectedRouted ||
		(req[3] != MethodGet && req[3] != MethodSet) {
		return false
	}
	// validate_mad: a CM MAD of another attribute than ClassPortInfo
	// that is not a Send is dropped, never answered.
	if req[1] == ClassCM && AttrID(binary.BigEndian.Uint16(req[16:])) != attrClassPortInfo {
		return false
	}
	copy(resp, req)
	resp[3] = MethodGetResp
	binary.BigEndian.PutUint16(resp[4:], StatusUnsupportedMethodAttr)
	return true
}

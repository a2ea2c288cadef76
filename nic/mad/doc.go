// Package mad is the wire format of management datagrams on QP1: the common MAD
// header (IBTA 13.4.2) and the communication manager's messages (IBTA 12.6, CM
// class 0x07, version 2), REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and
// SIDR_REP, laid out as Linux's ib_cm lays them (include/rdma/ibta_vol1_c12.h),
// and the rdma_cm header that the IP port spaces put at the start of REQ and
// SIDR_REQ private data. It parses and encodes; it keeps no state. The connection
// manager stands on it.
//
// A MAD is 256 bytes: the 24-byte header, then 232 bytes of CM data. Field
// offsets in this package are those of the tables, from the start of the CM data.
// Parse functions never panic: a short buffer is ErrTruncated, a MAD of another
// class or version ErrNotCM.
package mad

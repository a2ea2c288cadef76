package verbs

import (
	"github.com/xrnic/xrnic/nic/qpstate"
	"github.com/xrnic/xrnic/nic/wire"
)

// PSN is a 24-bit packet sequence number, as QPAttr's SQPSN and RQPSN take it.
type PSN = wire.PSN

// QP attribute mask bits (enum ibv_qp_attr_mask) for QP.Modify.
const (
	AttrState           = qpstate.AttrState
	AttrCurState        = qpstate.AttrCurState
	AttrAccessFlags     = qpstate.AttrAccessFlags
	AttrPKeyIndex       = qpstate.AttrPKeyIndex
	AttrPort            = qpstate.AttrPort
	AttrQKey            = qpstate.AttrQKey
	AttrAV              = qpstate.AttrAV
	AttrPathMTU         = qpstate.AttrPathMTU
	AttrTimeout         = qpstate.AttrTimeout
	AttrRetryCnt        = qpstate.AttrRetryCnt
	AttrRNRRetry        = qpstate.AttrRNRRetry
	AttrRQPSN           = qpstate.AttrRQPSN
	AttrMaxQPRdAtomic   = qpstate.AttrMaxQPRdAtomic
	AttrMinRNRTimer     = qpstate.AttrMinRNRTimer
	AttrSQPSN           = qpstate.AttrSQPSN
	AttrMaxDestRdAtomic = qpstate.AttrMaxDestRdAtomic
	AttrCap             = qpstate.AttrCap
	AttrDestQPN         = qpstate.AttrDestQPN
)

// Path MTUs (enum ibv_mtu).
const (
	MTU256  = qpstate.MTU256
	MTU512  = qpstate.MTU512
	MTU1024 = qpstate.MTU1024
	MTU2048 = qpstate.MTU2048
	MTU4096 = qpstate.MTU4096
)

// QP access flags for QPAttr.AccessFlags (the remote rights a QP grants).
const (
	QPAccessRemoteWrite  = qpstate.AccessRemoteWrite
	QPAccessRemoteRead   = qpstate.AccessRemoteRead
	QPAccessRemoteAtomic = qpstate.AccessRemoteAtomic
)

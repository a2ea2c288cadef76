//go:build !amd64

package wire

var hasFoldCopy = false

func foldCopy(r uint32, dst, src *byte, n int, acc *[16]byte) { panic("unreachable") }

func foldCRC(r uint32, p *byte, n int, acc *[16]byte) { panic("unreachable") }

var hasFold16 = false

func fold16(r uint32, p *byte, n int) uint32 { panic("unreachable") }

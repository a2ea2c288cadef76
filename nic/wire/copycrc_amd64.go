package wire

import "golang.org/x/sys/cpu"

// hasFold16: fold16's carry-less products and PEXTRD.
var hasFold16 = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41

// hasFoldCopy: foldCopy's and foldCRC's 512-bit carry-less products and
// ternary logic, and fold16, which reduces what they leave (CopyUpdateIEEE,
// updateIEEE).
var hasFoldCopy = hasFold16 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasAVX512VL

//go:noescape
func foldCopy(r uint32, dst, src *byte, n int, acc *[16]byte)

//go:noescape
func foldCRC(r uint32, p *byte, n int, acc *[16]byte)

//go:noescape
func fold16(r uint32, p *byte, n int) uint32

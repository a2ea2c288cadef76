#include "textflag.h"

// CRC-32 (reflected IEEE) folding while copying, for CopyUpdateIEEE. Each
// 128-bit lane of an accumulator is moved D bits further down the message by
// two carry-less products: its low quadword times x^(D+32) mod P, its high
// one times x^(D-32) mod P, both bit-reversed and shifted left once (the
// reflected form of Intel's "Fast CRC Computation Using PCLMULQDQ"; the
// constants come from TestFoldConstants).
DATA fold2048<>+0(SB)/8, $0x11542778a
DATA fold2048<>+8(SB)/8, $0x1322d1430
GLOBL fold2048<>(SB), RODATA|NOPTR, $16

DATA fold512<>+0(SB)/8, $0x154442bd4
DATA fold512<>+8(SB)/8, $0x1c6e41596
GLOBL fold512<>(SB), RODATA|NOPTR, $16

DATA fold128<>+0(SB)/8, $0x1751997d0
DATA fold128<>+8(SB)/8, $0x0ccaa009e
GLOBL fold128<>(SB), RODATA|NOPTR, $16

// LOAD4 loads the 256 bytes at SI into Z11-Z14.
#define LOAD4 \
	VMOVDQU64 (SI), Z11; \
	VMOVDQU64 64(SI), Z12; \
	VMOVDQU64 128(SI), Z13; \
	VMOVDQU64 192(SI), Z14

// STORE4 stores Z11-Z14 at DI.
#define STORE4 \
	VMOVDQU64 Z11, (DI); \
	VMOVDQU64 Z12, 64(DI); \
	VMOVDQU64 Z13, 128(DI); \
	VMOVDQU64 Z14, 192(DI)

// FOLD4 moves each of the accumulators Z1-Z4 2048 bits on (Z0 holds
// fold2048) and adds the 256 bytes in Z11-Z14 to them.
#define FOLD4 \
	VPCLMULQDQ $0x11, Z0, Z1, Z5; \
	VPCLMULQDQ $0x00, Z0, Z1, Z1; \
	VPTERNLOGD $0x96, Z11, Z5, Z1; \
	VPCLMULQDQ $0x11, Z0, Z2, Z6; \
	VPCLMULQDQ $0x00, Z0, Z2, Z2; \
	VPTERNLOGD $0x96, Z12, Z6, Z2; \
	VPCLMULQDQ $0x11, Z0, Z3, Z7; \
	VPCLMULQDQ $0x00, Z0, Z3, Z3; \
	VPTERNLOGD $0x96, Z13, Z7, Z3; \
	VPCLMULQDQ $0x11, Z0, Z4, Z8; \
	VPCLMULQDQ $0x00, Z0, Z4, Z4; \
	VPTERNLOGD $0x96, Z14, Z8, Z4

// START takes the first 256 bytes from Z11-Z14 into the accumulators Z1-Z4,
// with the raw CRC register in AX xored into the first four, and loads
// fold2048 into Z0.
#define START \
	VMOVDQA64       Z11, Z1; \
	VMOVDQA64       Z12, Z2; \
	VMOVDQA64       Z13, Z3; \
	VMOVDQA64       Z14, Z4; \
	VPXORQ          Z10, Z10, Z10; \
	VMOVD           AX, X10; \
	VPXORQ          Z10, Z1, Z1; \
	VBROADCASTI32X4 fold2048<>(SB), Z0

// COMBINE folds Z1-Z4 into 128 bits and stores them at DX: each accumulator
// 512 bits onto the next (Z1 onto Z2, onto Z3, onto Z4), then each 128-bit
// lane onto the next, the lowest first.
#define COMBINE \
	VBROADCASTI32X4 fold512<>(SB), Z0; \
	VPCLMULQDQ      $0x11, Z0, Z1, Z5; \
	VPCLMULQDQ      $0x00, Z0, Z1, Z1; \
	VPTERNLOGD      $0x96, Z2, Z5, Z1; \
	VPCLMULQDQ      $0x11, Z0, Z1, Z5; \
	VPCLMULQDQ      $0x00, Z0, Z1, Z1; \
	VPTERNLOGD      $0x96, Z3, Z5, Z1; \
	VPCLMULQDQ      $0x11, Z0, Z1, Z5; \
	VPCLMULQDQ      $0x00, Z0, Z1, Z1; \
	VPTERNLOGD      $0x96, Z4, Z5, Z1; \
	VMOVDQU         fold128<>(SB), X0; \
	VEXTRACTI32X4   $1, Z1, X2; \
	VEXTRACTI32X4   $2, Z1, X3; \
	VEXTRACTI32X4   $3, Z1, X4; \
	VPCLMULQDQ      $0x11, X0, X1, X5; \
	VPCLMULQDQ      $0x00, X0, X1, X1; \
	VPTERNLOGD      $0x96, X2, X5, X1; \
	VPCLMULQDQ      $0x11, X0, X1, X5; \
	VPCLMULQDQ      $0x00, X0, X1, X1; \
	VPTERNLOGD      $0x96, X3, X5, X1; \
	VPCLMULQDQ      $0x11, X0, X1, X5; \
	VPCLMULQDQ      $0x00, X0, X1, X1; \
	VPTERNLOGD      $0x96, X4, X5, X1; \
	VMOVDQU         X1, (DX); \
	VZEROUPPER

// func foldCopy(r uint32, dst, src *byte, n int, acc *[16]byte)
//
// Copies n bytes (a multiple of 256, at least 256) from src to dst and folds
// them, with the raw CRC register r xored into the first four, into the 16
// bytes at acc: the raw register after the n bytes is the raw CRC of acc from
// a zero register. Four 512-bit accumulators, 256 bytes a round, so that the
// products of one round do not wait on each other.
TEXT ·foldCopy(SB), NOSPLIT, $0-40
	MOVL r+0(FP), AX
	MOVQ dst+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ acc+32(FP), DX

	LOAD4
	STORE4
	START
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, CX

loop:
	CMPQ CX, $256
	JLT  combine
	LOAD4
	STORE4
	FOLD4
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, CX
	JMP  loop

combine:
	COMBINE
	RET

// func foldCRC(r uint32, p *byte, n int, acc *[16]byte)
//
// foldCopy without the copy: folds the n bytes at p (a multiple of 256, at
// least 256), with the raw CRC register r xored into the first four, into the
// 16 bytes at acc. For a receiver's ICRC check, where hash/crc32's fold of
// 128 bits a product is the slower (BenchmarkParseVerify4K).
TEXT ·foldCRC(SB), NOSPLIT, $0-32
	MOVL r+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ acc+24(FP), DX

	LOAD4
	START
	ADDQ $256, SI
	SUBQ $256, CX

loop:
	CMPQ CX, $256
	JLT  combine
	LOAD4
	FOLD4
	ADDQ $256, SI
	SUBQ $256, CX
	JMP  loop

combine:
	COMBINE
	RET

// The constants of the final reduction (Intel's paper, the reflected form,
// as hash/crc32 has them): a folding constant for the 96 -> 64-bit step,
// then Barrett's P and floor(x^64 / P) for the 64 -> 32-bit one.
DATA fold96<>+0(SB)/8, $0x163cd6124
GLOBL fold96<>(SB), RODATA|NOPTR, $8

DATA barrett<>+0(SB)/8, $0x1db710641
DATA barrett<>+8(SB)/8, $0x1f7011641
GLOBL barrett<>(SB), RODATA|NOPTR, $16

// func fold16(r uint32, p *byte, n int) uint32
//
// The raw CRC register after the n bytes at p (n a multiple of 16, at
// least 16) from the raw register r: one 128-bit accumulator folded 16
// bytes at a time, then reduced to 32 bits. For the short frames hash/crc32
// takes through wrappers and a 64-byte minimum (updateIEEE).
TEXT ·fold16(SB), NOSPLIT, $0-28
	MOVL r+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX

	MOVOU (SI), X1
	MOVL  AX, X0
	PXOR  X0, X1
	ADDQ  $16, SI
	SUBQ  $16, CX
	MOVOU fold128<>(SB), X0

loop16:
	CMPQ      CX, $16
	JLT       reduce
	MOVOU     (SI), X2
	MOVOA     X1, X5
	PCLMULQDQ $0x00, X0, X1
	PCLMULQDQ $0x11, X0, X5
	PXOR      X5, X1
	PXOR      X2, X1
	ADDQ      $16, SI
	SUBQ      $16, CX
	JMP       loop16

reduce:
	// 128 -> 96 bits: the low quadword times fold128's high constant
	// onto the high one (X0 is still fold128).
	PCMPEQB   X3, X3
	PCLMULQDQ $0x01, X1, X0
	PSRLDQ    $8, X1
	PXOR      X0, X1

	// 96 -> 64 bits: the low 32 times fold96 onto the rest; then
	// Barrett's reduction from 64 bits to 32.
	MOVOA     X1, X2
	MOVQ      fold96<>(SB), X0
	PSRLQ     $32, X3
	PSRLDQ    $4, X2
	PAND      X3, X1
	PCLMULQDQ $0x00, X0, X1
	PXOR      X2, X1

	MOVOU     barrett<>(SB), X0
	MOVOA     X1, X2
	PAND      X3, X1
	PCLMULQDQ $0x10, X0, X1
	PAND      X3, X1
	PCLMULQDQ $0x00, X0, X1
	PXOR      X2, X1
	PEXTRD    $1, X1, AX
	MOVL      AX, ret+24(FP)
	RET

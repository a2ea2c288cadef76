package mr

// Every limit and default of the package, in one place (STYLE: "every limit lives in
// one file"). rxe facts cite drivers/infiniband/sw/rxe (rxe_param.h, rxe_pool.c).

const (
	// KeyIndexShift: an L_Key or R_Key is index<<8 | key byte (rxe_mr_init: key =
	// elem.index << 8 | rxe_get_next_key()). The low byte is the consumer-owned
	// key part (a fast registration may change it); the upper 24 bits name the
	// table entry.
	KeyIndexShift = 8

	// MinIndex is the first index handed out (RXE_MIN_MR_INDEX = 1), so keys
	// 0x00-0xFF never name a region: a zeroed RETH or SGE cannot match anything.
	MinIndex = 1

	// MaxIndex is the largest index a 32-bit key can carry (24 bits).
	MaxIndex = 1<<(32-KeyIndexShift) - 1

	// DefaultMaxRegions is NewTable's capacity when asked for 0 or less: rxe's
	// RXE_MAX_MR (256 * 1024).
	DefaultMaxRegions = 256 * 1024

	// MaxRegions is the largest capacity NewTable accepts: every index from
	// MinIndex to MaxIndex.
	MaxRegions = MaxIndex - MinIndex + 1

	// chunkShift sets how many slots share one lazily allocated chunk of the
	// two-level slot array: a table costs 8 bytes per possible chunk up front and
	// 16 bytes per slot only once an index in that chunk is first used.
	chunkShift = 10
	chunkSize  = 1 << chunkShift

	// AtomicLen is the operand size of IBTA atomics (CmpSwap, FetchAdd, and the
	// A19 ATOMIC WRITE): one naturally aligned 64-bit word.
	AtomicLen = 8

	// MaxFastRegPages is the longest page list a fast-reg region may hold: rxe's
	// RXE_MAX_FMR_PAGE_LIST_LEN, its max_fast_reg_page_list_len.
	MaxFastRegPages = 512

	// MinPageSize and MaxPageSize bound MapSG's page size (powers of two).
	MinPageSize = 512
	MaxPageSize = 1 << 30

	// atomicStripes is the number of locks that serialise atomics on host
	// addresses that are not 8-byte aligned (see atomic.go).
	atomicStripes = 64
)

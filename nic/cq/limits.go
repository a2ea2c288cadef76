// Limits of the completion queue, in one place (rxe keeps them in rxe_param.h).

package cq

const (
	// MaxLogCQE is rxe's RXE_MAX_LOG_CQE: a CQ has at most 1<<MaxLogCQE ring slots.
	MaxLogCQE = 15

	// MaxCQE is the largest depth New and Resize accept, rxe's device attribute
	// max_cqe = (1 << RXE_MAX_LOG_CQE) - 1. One slot of the ring stays empty, as in
	// rxe_queue.c, so a request for cqe entries gets roundup_pow_of_two(cqe+1)
	// slots and holds exactly slots-1 completions.
	MaxCQE = 1<<MaxLogCQE - 1
)

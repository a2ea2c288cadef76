/* librdmacm's calls that xrnic's does not make yet (rsockets, multicast,
 * ECE): each fails with ENOSYS. rdma_cma.h is not
 * included: the stubs' prototypes are not its. */
#include <errno.h>

#define XR_EXPORT __attribute__((visibility("default")))

#define STUB(name)                                                                                                     \
	XR_EXPORT long name(void);                                                                                     \
	long name(void)                                                                                                \
	{                                                                                                              \
		errno = ENOSYS;                                                                                        \
		return -1;                                                                                             \
	}

#include "rdmacm.inc"

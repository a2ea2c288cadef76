/* rdma-core's private ABI (IBVERBS_PRIVATE_34), which Debian's provider
 * libraries (libmlx5, libefa) import and perftest links: they must resolve
 * for those libraries to load. Their devices never appear here, so these are
 * never reached with a device of theirs; each fails with EOPNOTSUPP. */
#include <errno.h>

#include "internal.h"

#define STUB(name)                                                                                                     \
	XR_EXPORT long name(void);                                                                                     \
	long name(void)                                                                                                \
	{                                                                                                              \
		errno = EOPNOTSUPP;                                                                                    \
		return EOPNOTSUPP;                                                                                     \
	}

#include "private.inc"

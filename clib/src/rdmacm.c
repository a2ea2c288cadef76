/* librdmacm.so.1, for now only its symbols: perftest links it and must load.
 * Every call fails with ENOSYS (-1, or NULL), until the connection manager
 * reaches the daemon's (issue 17's librdmacm); rdma_event_str names events.
 * rdma_cma.h is not included: the stubs' prototypes are not its. */
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

XR_EXPORT const char *rdma_event_str(int event);
const char *rdma_event_str(int event)
{
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",	  "RDMA_CM_EVENT_ADDR_ERROR",	    "RDMA_CM_EVENT_ROUTE_RESOLVED",
		"RDMA_CM_EVENT_ROUTE_ERROR",	  "RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",	  "RDMA_CM_EVENT_UNREACHABLE",	    "RDMA_CM_EVENT_REJECTED",
		"RDMA_CM_EVENT_ESTABLISHED",	  "RDMA_CM_EVENT_DISCONNECTED",	    "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",	  "RDMA_CM_EVENT_MULTICAST_ERROR",  "RDMA_CM_EVENT_ADDR_CHANGE",
		"RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

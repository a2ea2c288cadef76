package cm

import "time"

// IBTime converts an IBTA time exponent t (the 5-bit timeouts of the CM messages
// and the path's packet life time) to a duration: 4.096 µs × 2^t (IBTA 12.7.2).
// Exponents past 31 count as 31.
func IBTime(t uint8) time.Duration {
	if t > 31 {
		t = 31
	}
	return 4096 * time.Nanosecond << t
}

// responseWait is how long a CM request waits for its answer: twice the packet
// life time (there and back) plus the responder's CM response timeout (IBTA
// 12.7.2; ib_send_cm_req's timeout_ms).
func responseWait(packetLife, response uint8) time.Duration {
	return 2*IBTime(packetLife) + IBTime(response)
}

// allTries is how long a request and its retries wait in all.
func allTries(wait time.Duration, retries uint8) time.Duration {
	return wait * time.Duration(1+int(retries))
}

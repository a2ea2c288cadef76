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

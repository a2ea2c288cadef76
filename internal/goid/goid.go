// Package goid tells which goroutine is running, for the few places that must
// refuse a call that would wait for the goroutine making it (a blocking close from
// the object's own callback). It parses the header of runtime.Stack: slow and
// allocating, so it is for control paths only, never the data path.
package goid

import (
	"runtime"
	"strconv"
)

// ID returns the current goroutine's id (the number in "goroutine N [running]").
func ID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	if len(b) < len(prefix) {
		return 0
	}
	b = b[len(prefix):]
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	id, _ := strconv.ParseUint(string(b[:i]), 10, 64)
	return id
}

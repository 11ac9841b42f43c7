package testenv

import (
	"os"
	"strconv"
	"strings"
)

// ThreadReads is how many read system calls the calling thread has made (syscr of /proc/thread-self/io, which
// counts a read that found nothing too); ok is false where the kernel does not account them. A test that counts
// its goroutine's reads locks it to its thread first (runtime.LockOSThread).
func ThreadReads() (n int64, ok bool) {
	b, err := os.ReadFile("/proc/thread-self/io")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, "syscr: "); found {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

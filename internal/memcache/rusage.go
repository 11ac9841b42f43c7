package memcache

import (
	"strconv"
	"syscall"
)

// rusage is the process CPU time as memcached prints it: seconds.microseconds.
type rusage struct{ user, system string }

func (r *rusage) read() {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		r.user, r.system = "0.000000", "0.000000"
		return
	}
	r.user = tv(u.Utime)
	r.system = tv(u.Stime)
}

func tv(t syscall.Timeval) string {
	us := strconv.FormatInt(int64(t.Usec), 10)
	for len(us) < 6 {
		us = "0" + us
	}
	return strconv.FormatInt(int64(t.Sec), 10) + "." + us
}

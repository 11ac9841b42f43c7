package sockio

import (
	"net"
	"time"
)

// The pause after a failed Accept that is retried: 5 ms, doubled on each failure in a row, at most 1 s.
const (
	minAcceptPause = 5 * time.Millisecond
	maxAcceptPause = time.Second
)

// AcceptLoop is a door's accept loop: it accepts connections on a listener and hands each to the door, and rides
// out failures that may pass (out of file descriptors, a connection aborted before it was accepted) by pausing
// before the next Accept, 5 ms doubled on each failure in a row up to 1 s, instead of spinning on them. Each door
// says which failures those are and whether it logs them; Closed, Retry and Retrying are called on the accepting
// goroutine.
type AcceptLoop struct {
	// Closed reports whether the door is shutting down: a failed Accept then ends the loop with nil. Required.
	Closed func() bool
	// Retry reports whether a failed Accept is worth trying again after a pause; any other failure ends the loop
	// with Accept's error. Required.
	Retry func(err error) bool
	// Retrying, when set, is told of each failure retried and the pause before the next Accept.
	Retrying func(err error, pause time.Duration)
}

// Run accepts on ln until the door is closed (nil), serve returns false (nil), or Accept fails with an error that
// is not retried (that error). serve runs on the accepting goroutine and owns nc.
func (l AcceptLoop) Run(ln net.Listener, serve func(nc net.Conn) bool) error {
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if l.Closed() {
				return nil
			}
			if l.Retry(err) {
				pause = min(max(2*pause, minAcceptPause), maxAcceptPause)
				if l.Retrying != nil {
					l.Retrying(err, pause)
				}
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		if !serve(nc) {
			return nil
		}
	}
}

//go:build !unix

package bench

import "time"

// selfCPU is not measured here.
func selfCPU() (time.Duration, bool) { return 0, false }

// childrenCPU is not measured here.
func childrenCPU() (time.Duration, bool) { return 0, false }

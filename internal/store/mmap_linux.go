package store

import (
	"strconv"
	"syscall"
)

// The arenas' memory is mapped outside Go's heap: the collector never scans or counts it, untouched pages cost
// nothing, and pages given back (releaseBytes) leave the process's RSS at once.

func mapBytes(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
	if err != nil {
		panic("store: cannot map " + strconv.Itoa(n) + " bytes for an arena: " + err.Error())
	}
	return b
}

func unmapBytes(b []byte) {
	if len(b) > 0 {
		syscall.Munmap(b)
	}
}

// releaseBytes gives b's pages back to the system; they read as zeros after.
func releaseBytes(b []byte) {
	if len(b) > 0 {
		syscall.Madvise(b, syscall.MADV_DONTNEED)
	}
}

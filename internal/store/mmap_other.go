//go:build !linux

package store

// Elsewhere the arenas are ordinary Go memory (without pointers, so the collector does not scan them).

func mapBytes(n int) []byte { return make([]byte, n) }

func unmapBytes([]byte) {}

func releaseBytes(b []byte) { clear(b) }

package engine

import (
	"errors"
	"fmt"

	"github.com/keywaydb/keyway/internal/container"
)

// ErrorKind says how a door reports an error the engine returned, in
// memcached's words.
type ErrorKind uint8

const (
	// ServerFault: the server could not do it (MySQL down, disk full):
	// "SERVER_ERROR <reason>"; binary status 0x84 (internal error).
	ServerFault ErrorKind = iota
	// ClientFault: the request cannot succeed as sent (a key that does not fit
	// the key column or has no shard, a container that does not exist, an operation its policy
	// disables): "CLIENT_ERROR <reason>"; binary status 0x04 (invalid arguments).
	ClientFault
	// ValueTooLarge: the value does not fit its column, memcached's "object
	// too large": "SERVER_ERROR object too large for cache: <reason>"; binary
	// status 0x03 (value too large).
	ValueTooLarge
)

// clientError marks an error as the request's fault.
type clientError struct{ error }

func (e clientError) Unwrap() error { return e.error }

func clientErrorf(format string, args ...any) error {
	return clientError{fmt.Errorf(format, args...)}
}

// KindOf classifies err for the doors.
func KindOf(err error) ErrorKind {
	var ce clientError
	switch {
	case errors.Is(err, container.ErrValueTooLong):
		return ValueTooLarge
	case errors.As(err, &ce), errors.Is(err, ErrNoContainer),
		errors.Is(err, container.ErrKeyTooLong), errors.Is(err, container.ErrNoShard), errors.Is(err, container.ErrTooManyValues), errors.Is(err, container.ErrValueType):
		return ClientFault
	}
	return ServerFault
}

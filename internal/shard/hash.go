package shard

import (
	"crypto/cipher"
	"crypto/des"
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// The two keyspace-id functions, as Vitess defines its `hash` and `xxhash` vindexes (vitess
// go/vt/vtgate/vindexes/hash.go and xxhash.go), so that a migration from Vitess and Vitess's tools compute the same
// shard. A keyspace id is 8 bytes, and shards own ranges of them compared as byte strings; here it is held as the
// big-endian uint64 of those bytes, whose numeric order is that byte order.

// desBlock is DES with the all-zero 8-byte key. (Vitess once used 3DES; with a null key it is the same cipher.)
var desBlock = func() cipher.Block {
	b, err := des.NewCipher(make([]byte, des.BlockSize))
	if err != nil {
		panic(err) // cannot happen: the key has the right length
	}
	return b
}()

// desBuf is a pair of blocks for one encryption. cipher.Block's Encrypt is an interface call, through which the
// compiler cannot see that the slices do not escape; pooled buffers keep hashID from allocating.
type desBuf struct{ in, out [des.BlockSize]byte }

var desBufs = sync.Pool{New: func() any { return new(desBuf) }}

// hashID is Vitess's `hash` vindex: DES (all-zero key) encrypting the value's 8 big-endian bytes; the 8 bytes of
// ciphertext are the keyspace id. 1 → 166b40b44aba4bd6.
func hashID(v uint64) uint64 {
	b := desBufs.Get().(*desBuf)
	binary.BigEndian.PutUint64(b.in[:], v)
	desBlock.Encrypt(b.out[:], b.in[:])
	id := binary.BigEndian.Uint64(b.out[:])
	desBufs.Put(b)
	return id
}

// xxhashID is Vitess's `xxhash` vindex: XXH64 with seed 0 over the bytes, whose 8 bytes in little-endian order are
// the keyspace id. As a big-endian uint64 that is the hash with its bytes reversed.
func xxhashID(b []byte) uint64 { return bits.ReverseBytes64(xxhash.Sum64(b)) }

// xxhashInteger is xxhashID of an integer literal's canonical decimal text (Vitess hashes an integer value's text:
// "-1", "18446744073709551615"), so that 007 and 7 shard alike.
func xxhashInteger(b []byte) (uint64, bool) {
	var buf [24]byte
	var text []byte
	if len(b) > 0 && b[0] == '-' {
		v, ok := parseInt64(b)
		if !ok {
			return 0, false
		}
		text = strconv.AppendInt(buf[:0], v, 10)
	} else {
		v, ok := parseUint64(b)
		if !ok {
			return 0, false
		}
		text = strconv.AppendUint(buf[:0], v, 10)
	}
	return xxhashID(text), true
}

// parseUint64Bits reads an integer as Vitess's hash vindex takes it: a negative int64 as its two's complement bits
// (-1 is 0xffffffffffffffff), else an unsigned integer up to 18446744073709551615.
func parseUint64Bits(b []byte) (uint64, bool) {
	if len(b) > 0 && b[0] == '-' {
		v, ok := parseInt64(b)
		return uint64(v), ok
	}
	return parseUint64(b)
}

// parseUint64 reads decimal digits (at least one; leading zeros allowed) as a uint64, without allocating.
func parseUint64(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		hi, lo := bits.Mul64(v, 10)
		if hi != 0 {
			return 0, false
		}
		var carry uint64
		v, carry = bits.Add64(lo, uint64(c-'0'), 0)
		if carry != 0 {
			return 0, false
		}
	}
	return v, true
}

// parseInt64 reads an optional '-' and decimal digits as an int64, without allocating.
func parseInt64(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	u, ok := parseUint64(b)
	switch {
	case !ok:
		return 0, false
	case neg && u <= math.MaxInt64+1:
		return int64(-u), true // -(1<<63) wraps to itself
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	}
	return 0, false
}

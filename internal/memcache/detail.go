package memcache

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// prefixDelimiter ends a key's prefix for `stats detail`, memcached's -D
// default.
const prefixDelimiter = ':'

// maxPrefixes bounds the prefixes `stats detail` counts (memcached has no
// bound): a client naming endless prefixes cannot grow keyway's memory
// without end. A prefix first seen past it is not counted.
const maxPrefixes = 1 << 16

// prefixHashSize is memcached's PREFIX_HASH_SIZE: a dump lists the prefixes
// by their bucket in a table this large, as memcached's does.
const prefixHashSize = 256

// prefixStats is memcached's `stats detail`: once turned on (server-wide, as
// in memcached), each get, set and delete of a key with a prefix (the part
// before the first ':') is counted under that prefix, in the same places
// memcached counts it: text get/gets/gat/gats per key, the storage commands
// (set, add, replace, append, prepend, cas) once their line is read, delete
// once its key is legal, and the binary get, getk, gat, touch, set, add,
// replace, append, prepend and delete. The meta commands and the text incr,
// decr and touch are not counted, as in memcached 1.6.18.
type prefixStats struct {
	on atomic.Bool
	mu struct {
		sync.Mutex
		byName map[string]*prefixCount
		seq    uint64 // order of first sight
	}
}

type prefixCount struct {
	name                   string
	bucket                 uint32
	seq                    uint64
	gets, hits, sets, dels uint64
}

type prefixEvent uint8

const (
	prefixGet prefixEvent = iota
	prefixHit
	prefixSet
	prefixDel
)

// get counts a retrieval of key; hit says whether it was found.
func (p *prefixStats) get(key []byte, hit bool) {
	if !p.on.Load() {
		return
	}
	if hit {
		p.record(key, prefixHit)
	} else {
		p.record(key, prefixGet)
	}
}

func (p *prefixStats) set(key []byte) {
	if p.on.Load() {
		p.record(key, prefixSet)
	}
}

func (p *prefixStats) del(key []byte) {
	if p.on.Load() {
		p.record(key, prefixDel)
	}
}

// record counts ev under key's prefix: the bytes before the first ':' (or
// NUL, where memcached's C string ends); a key with neither has no prefix.
func (p *prefixStats) record(key []byte, ev prefixEvent) {
	n := 0
	for n < len(key) && key[n] != 0 && key[n] != prefixDelimiter {
		n++
	}
	if n == len(key) {
		return
	}
	prefix := key[:n]
	p.mu.Lock()
	defer p.mu.Unlock()
	pc := p.mu.byName[string(prefix)]
	if pc == nil {
		if len(p.mu.byName) >= maxPrefixes {
			return
		}
		if p.mu.byName == nil {
			p.mu.byName = make(map[string]*prefixCount)
		}
		p.mu.seq++
		pc = &prefixCount{name: string(prefix), bucket: murmur3(prefix) % prefixHashSize, seq: p.mu.seq}
		p.mu.byName[pc.name] = pc
	}
	switch ev {
	case prefixHit:
		pc.hits++
		pc.gets++
	case prefixGet:
		pc.gets++
	case prefixSet:
		pc.sets++
	case prefixDel:
		pc.dels++
	}
}

// reset forgets every prefix, as memcached's `stats reset` does.
func (p *prefixStats) reset() {
	p.mu.Lock()
	p.mu.byName = nil
	p.mu.Unlock()
}

// dump appends memcached's `stats detail dump`: a "PREFIX name get N hit N
// set N del N" line per prefix, in memcached's order (by hash bucket, the
// newest first within one), then END.
func (p *prefixStats) dump(dst []byte) []byte {
	p.mu.Lock()
	list := make([]*prefixCount, 0, len(p.mu.byName))
	for _, pc := range p.mu.byName {
		c := *pc
		list = append(list, &c)
	}
	p.mu.Unlock()
	slices.SortFunc(list, func(a, b *prefixCount) int {
		if a.bucket != b.bucket {
			return int(a.bucket) - int(b.bucket)
		}
		return -cmp.Compare(a.seq, b.seq)
	})
	for _, pc := range list {
		dst = append(dst, "PREFIX "...)
		dst = append(dst, pc.name...)
		dst = append(dst, " get "...)
		dst = strconv.AppendUint(dst, pc.gets, 10)
		dst = append(dst, " hit "...)
		dst = strconv.AppendUint(dst, pc.hits, 10)
		dst = append(dst, " set "...)
		dst = strconv.AppendUint(dst, pc.sets, 10)
		dst = append(dst, " del "...)
		dst = strconv.AppendUint(dst, pc.dels, 10)
		dst = append(dst, "\r\n"...)
	}
	return append(dst, replyEnd...)
}

// murmur3 is MurmurHash3_x86_32 with seed 0, memcached 1.6's default hash,
// here only to list prefixes in memcached's order.
func murmur3(key []byte) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	var h uint32
	n := len(key) / 4
	for i := 0; i < n; i++ {
		k := binary.LittleEndian.Uint32(key[4*i:])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	tail := key[4*n:]
	switch len(tail) {
	case 3:
		k ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(tail[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(len(key))
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// statsDetail answers the text `stats detail on|off|dump` (toks[2] is the
// word; memcached reads only that one).
func (c *conn) statsDetail(toks [][]byte) {
	word := ""
	if len(toks) > 2 {
		word = string(toks[2])
	}
	p := &c.srv.prefixes
	switch word {
	case "on":
		p.on.Store(true)
		c.out = append(c.out, replyOK...)
	case "off":
		p.on.Store(false)
		c.out = append(c.out, replyOK...)
	case "dump":
		c.out = p.dump(c.out)
	default:
		c.out = append(c.out, "CLIENT_ERROR usage: stats detail on|off|dump\r\n"...)
	}
}

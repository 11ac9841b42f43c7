package memcache

import (
	"bytes"
	"strconv"

	"github.com/keywaydb/keyway/internal/store"
)

// memcached's slab class ids run from 1 to 63 (POWER_SMALLEST to
// MAX_SLAB_CLASSES-1); a crawler naming another is refused.
const maxSlabClass = 63

// lruCrawler answers memcached 1.6.18's lru_crawler commands. metadump
// lists the items (php-memcached's getAllKeys reads it). keyway's store
// crawls for expired items all the time and cannot be told otherwise, so
// crawl, tocrawl and sleep are checked as memcached checks them and
// acknowledged, and enable and disable answer as memcached does when its
// crawler is already running or cannot be stopped.
func (c *conn) lruCrawler(toks [][]byte) {
	if len(toks) == 2 {
		switch string(toks[1]) {
		case "enable":
			c.out = append(c.out, "ERROR failed to start lru crawler thread\r\n"...)
		case "disable":
			c.out = append(c.out, "ERROR failed to stop lru crawler thread\r\n"...)
		default:
			c.out = append(c.out, replyError...)
		}
		return
	}
	if len(toks) != 3 {
		c.out = append(c.out, replyError...)
		return
	}
	arg := toks[2]
	switch string(toks[1]) {
	case "crawl":
		if _, ok := crawlClasses(arg); !ok {
			c.out = append(c.out, replyBadClass...)
			return
		}
		c.out = append(c.out, replyOK...)
	case "metadump":
		classes, ok := crawlClasses(arg)
		if !ok {
			c.out = append(c.out, replyBadClass...)
			return
		}
		if classes != (classSet{}) {
			c.metadump(&classes)
		}
		c.out = append(c.out, replyEnd...)
	case "tocrawl":
		if _, ok := parseUint32(arg); !ok {
			c.out = append(c.out, replyBadFormat...)
			return
		}
		c.out = append(c.out, replyOK...)
	case "sleep":
		n, ok := parseUint32(arg)
		if !ok {
			c.out = append(c.out, replyBadFormat...)
			return
		}
		if n > 1000000 {
			c.out = append(c.out, "CLIENT_ERROR sleep must be one second or less\r\n"...)
			return
		}
		c.out = append(c.out, replyOK...)
	default:
		c.out = append(c.out, replyError...)
	}
}

const replyBadClass = "BADCLASS invalid class id\r\n"

// classSet marks slab classes by id (see store.Class); ids past the store's
// classes are valid to name and hold nothing.
type classSet [store.NumClasses + 1]bool

// crawlClasses reads a crawler's class list as memcached does: "all",
// "hash", or class ids separated by commas. It returns the classes named,
// and whether the list is valid.
func crawlClasses(arg []byte) (set classSet, ok bool) {
	switch string(arg) {
	case "all", "hash":
		for id := 1; id <= store.NumClasses; id++ {
			set[id] = true
		}
		return set, true
	}
	for _, id := range bytes.Split(arg, []byte(",")) {
		if len(id) == 0 {
			continue // memcached's strtok skips empty fields
		}
		n, ok := parseUint32(id)
		if !ok || n < 1 || n > maxSlabClass {
			return classSet{}, false
		}
		if n <= store.NumClasses {
			set[n] = true
		}
	}
	return set, true
}

// metadump writes a line per live item, as memcached's crawler does:
// key=<URI-encoded key> exp=<Unix time, or -1 for none> la=<last access>
// cas=<id> fetch=<yes|no> cls=<class> size=<bytes charged>, each ended by
// "\n" alone, for the items of the classes named. The store is walked
// shard by shard; the lines go out as the reply buffer fills.
func (c *conn) metadump(classes *classSet) {
	c.stepAway() // the walk takes long whatever the client does: not on the loop
	c.eng.WalkItems(func(key string, it store.Item) bool {
		cls := store.Class(len(key), len(it.Value), it.Flags)
		if !classes[cls] {
			return true
		}
		b := append(c.out, "key="...)
		b = uriEncode(b, key)
		b = append(b, " exp="...)
		if it.Exptime == 0 {
			b = append(b, "-1"...)
		} else {
			b = strconv.AppendInt(b, it.Exptime, 10)
		}
		b = append(b, " la="...)
		b = strconv.AppendInt(b, it.LastAccess, 10)
		b = append(b, " cas="...)
		b = strconv.AppendUint(b, it.CAS, 10)
		b = append(b, " fetch="...)
		b = append(b, yesNo(it.Fetched)...)
		b = append(b, " cls="...)
		b = strconv.AppendInt(b, int64(cls), 10)
		b = append(b, " size="...)
		b = strconv.AppendInt(b, store.Size(len(key), len(it.Value)), 10)
		c.out = append(b, '\n')
		return c.flushIfFull() == nil
	})
}

// uriEncode appends s with every byte but letters, digits and "-._~"
// written as %XX, as memcached's uriencode.
func uriEncode(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '.', b == '_', b == '~':
			dst = append(dst, b)
		default:
			dst = append(dst, '%', hex[b>>4], hex[b&15])
		}
	}
	return dst
}

// cacheMemlimit is memcached's "cache_memlimit <megabytes> [noreply]": it
// changes the store's memory limit at once (a lower one evicts what no
// longer fits).
func (c *conn) cacheMemlimit(toks [][]byte) {
	if len(toks) != 2 && len(toks) != 3 {
		c.out = append(c.out, replyError...)
		return
	}
	quiet := noreply(toks)
	mb, ok := parseUint32(toks[1])
	switch {
	case !ok:
		c.reply(quiet, replyError)
	case mb < 8:
		c.reply(quiet, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n")
	case mb > 1000000000:
		c.reply(quiet, "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n")
	default:
		if err := c.eng.SetMemoryLimit(int64(mb) << 20); err != nil {
			c.reply(quiet, "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n")
			return
		}
		c.reply(quiet, replyOK)
	}
}

// cachedump is memcached's "stats cachedump <class> <limit>", which
// libmemcached's memcached_dump (and so php-memcached's getAllKeys) asks of
// every class in turn: "ITEM <key> [<bytes> b; <expiry, 0 for none> s]" per
// item, at most limit of them (0: all), then END. memcached lists only its
// cold LRU and at most 2 MiB of lines; keyway lists every live item of the
// class (store.Class), streamed.
func (c *conn) cachedump(toks [][]byte) {
	if len(toks) < 4 {
		c.out = append(c.out, "CLIENT_ERROR bad command line\r\n"...)
		return
	}
	class, ok1 := parseUint32(toks[2])
	limit, ok2 := parseUint32(toks[3])
	switch {
	case !ok1 || !ok2:
		c.out = append(c.out, replyBadFormat...)
		return
	case class > maxSlabClass:
		c.out = append(c.out, "CLIENT_ERROR Illegal slab id\r\n"...)
		return
	}
	if class >= 1 && class <= store.NumClasses {
		c.stepAway() // the walk takes long whatever the client does: not on the loop
		shown := uint32(0)
		c.eng.WalkItems(func(key string, it store.Item) bool {
			if store.Class(len(key), len(it.Value), it.Flags) != int(class) {
				return true
			}
			c.out = append(c.out, "ITEM "...)
			c.out = append(c.out, key...)
			c.out = append(c.out, " ["...)
			c.out = strconv.AppendInt(c.out, int64(len(it.Value)), 10)
			c.out = append(c.out, " b; "...)
			c.out = strconv.AppendInt(c.out, it.Exptime, 10)
			c.out = append(c.out, " s]\r\n"...)
			shown++
			return (limit == 0 || shown < limit) && c.flushIfFull() == nil
		})
	}
	c.out = append(c.out, replyEnd...)
}

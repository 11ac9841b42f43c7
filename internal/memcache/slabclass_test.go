package memcache

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/testenv"
)

// classItem is an item stored by TestSlabClassesMatchMemcached.
type classItem struct {
	key   string
	flags int
	size  int
}

// classItems sit on both sides of class boundaries (memcached's item takes
// 48 bytes of header, the key and a NUL, 4 bytes of flags when they are not
// 0, the value and "\r\n", and an 8-byte CAS id) and in classes up to the
// largest, with many in one class.
func classItems() []classItem {
	items := []classItem{
		{"a", 0, 36}, {"b", 0, 37}, {"c", 1, 32}, {"d", 1, 33}, {"k-200", 0, 2000},
		{"e", 0, 10000}, {"f", 5, 100000}, {"g", 0, 400000},
	}
	for i := range 30 {
		items = append(items, classItem{fmt.Sprintf("n-%02d", i), 0, 50})
	}
	return items
}

// setItems stores items on addr.
func setItems(t *testing.T, addr string, items []classItem) {
	t.Helper()
	var b strings.Builder
	for _, it := range items {
		fmt.Fprintf(&b, "set %s %d 0 %d noreply\r\n%s\r\n", it.key, it.flags, it.size, strings.Repeat("v", it.size))
	}
	b.WriteString("mn\r\n")
	if got := exchange(t, addr, b.String()); got != "MN\r\n" {
		t.Fatalf("setting the items: %.300q", got)
	}
}

// slabGeometry keeps the fields of stats slabs that say where memcached
// keeps items: each class's chunks and pages, and how many classes.
func slabGeometry(reply string) map[string]string {
	_, vals := statPairs(reply)
	keep := map[string]string{}
	for name, v := range vals {
		_, field, _ := strings.Cut(name, ":")
		switch field {
		case "chunk_size", "chunks_per_page", "total_pages", "total_chunks", "used_chunks", "free_chunks", "free_chunks_end":
			keep[name] = v
		}
		if name == "active_slabs" {
			keep[name] = v
		}
	}
	return keep
}

// itemClasses returns, from the server at addr, the class each item is in
// by me and by lru_crawler metadump, and the number of items per class by
// stats items.
func itemClasses(t *testing.T, addr string, items []classItem) (me, dump, number map[string]string) {
	t.Helper()
	cls := regexp.MustCompile(`^ME (\S+) .* cls=([0-9]+) `)
	me = map[string]string{}
	for _, it := range items {
		line := exchange(t, addr, "me "+it.key+"\r\nmn\r\n")
		m := cls.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("me %s: %q", it.key, line)
		}
		me[m[1]] = m[2]
	}
	dumpLine := regexp.MustCompile(`(?m)^key=(\S+) .* cls=([0-9]+) `)
	dump = map[string]string{}
	for _, m := range dumpLine.FindAllStringSubmatch(metadump(t, addr, "all"), -1) {
		dump[m[1]] = m[2]
	}
	_, vals := statPairs(exchange(t, addr, "stats items\r\nmn\r\n"))
	number = map[string]string{}
	for name, v := range vals {
		if strings.HasSuffix(name, ":number") {
			number[name] = v
		}
	}
	return me, dump, number
}

// TestSlabClassesMatchMemcached stores the same items in memcached 1.6 and
// keyway and checks keyway reports each in the slab class memcached keeps
// it in: stats slabs' chunks and pages, the class me and lru_crawler
// metadump name for each item, and stats items' count per class, with an
// item too large for one chunk (memcached chains chunks of its largest
// class) added last.
func TestSlabClassesMatchMemcached(t *testing.T) {
	mc := testenv.NewMemcached(t)
	kw := newTestServer(t)
	items := classItems()
	for _, addr := range []string{mc.Addr, kw} {
		setItems(t, addr, items)
	}
	want, got := slabGeometry(exchange(t, mc.Addr, "stats slabs\r\nmn\r\n")), slabGeometry(exchange(t, kw, "stats slabs\r\nmn\r\n"))
	if !maps.Equal(got, want) {
		t.Errorf("stats slabs:\nkeyway    %v\nmemcached %v", got, want)
	}
	if want["active_slabs"] != "6" {
		t.Errorf("memcached uses %s classes for the items, the test means 6", want["active_slabs"])
	}
	items = append(items, classItem{"h", 0, 600000})
	for _, addr := range []string{mc.Addr, kw} {
		setItems(t, addr, items[len(items)-1:])
	}
	mcMe, mcDump, mcNumber := itemClasses(t, mc.Addr, items)
	kwMe, kwDump, kwNumber := itemClasses(t, kw, items)
	for _, c := range []struct {
		what      string
		got, want map[string]string
	}{{"me", kwMe, mcMe}, {"lru_crawler metadump", kwDump, mcDump}, {"stats items", kwNumber, mcNumber}} {
		if len(c.want) == 0 || !maps.Equal(c.got, c.want) {
			t.Errorf("%s classes:\nkeyway    %v\nmemcached %v", c.what, c.got, c.want)
		}
	}
}

// TestCachedumpByClass checks stats cachedump lists the items of the class
// asked for, and only them.
func TestCachedumpByClass(t *testing.T) {
	kw := newTestServer(t)
	setItems(t, kw, classItems())
	_, dump, _ := itemClasses(t, kw, classItems())
	for _, class := range []string{"1", "2", "15", "39", "40"} {
		var want []string
		for key, c := range dump {
			if c == class {
				want = append(want, "ITEM "+key)
			}
		}
		reply := exchange(t, kw, "stats cachedump "+class+" 0\r\nmn\r\n")
		var got []string
		for _, line := range strings.Split(reply, "\r\n") {
			if key, _, ok := strings.Cut(line, " ["); ok {
				got = append(got, key)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("stats cachedump %s: %v, want %v", class, got, want)
		}
	}
}

// TestTotalMallocedLevel checks total_malloced is the store's high-water
// mark: it follows the items in, stays level when they are replaced by as
// many items of other (smaller) sizes, after deletes and a flush_all, and
// grows only when more is held at once than before.
func TestTotalMallocedLevel(t *testing.T) {
	kw := newTestServer(t)
	malloced := func() (total, bytes int64) {
		_, slabs := statPairs(exchange(t, kw, "stats slabs\r\nmn\r\n"))
		_, general := statPairs(exchange(t, kw, "stats\r\nmn\r\n"))
		total, _ = strconv.ParseInt(slabs["total_malloced"], 10, 64)
		bytes, _ = strconv.ParseInt(general["bytes"], 10, 64)
		return total, bytes
	}
	round := func(prefix string, keyLen, size int) []classItem {
		items := make([]classItem, 200)
		for i := range items {
			items[i] = classItem{fmt.Sprintf("%s%0*d", prefix, keyLen-len(prefix), i), 0, size}
		}
		setItems(t, kw, items)
		return items
	}
	deleteAll := func(items []classItem) {
		var b strings.Builder
		for _, it := range items {
			b.WriteString("delete " + it.key + " noreply\r\n")
		}
		exchange(t, kw, b.String()+"mn\r\n")
	}
	first := round("a", 10, 2000)
	peak, bytes := malloced()
	if peak != bytes || peak == 0 {
		t.Fatalf("after the first items: total_malloced %d, bytes %d; want them equal", peak, bytes)
	}
	old := first
	for i := range 10 {
		deleteAll(old)
		// Keys of other lengths, values a tenth as large: each shard
		// holds less than it did, whichever keys land in it.
		old = round(fmt.Sprintf("r%d-", i), 8+i%3*5, 200)
		if total, bytes := malloced(); total != peak || bytes >= peak {
			t.Fatalf("round %d: total_malloced %d (bytes %d), want it level at %d", i, total, bytes, peak)
		}
	}
	exchange(t, kw, "flush_all\r\nmn\r\n")
	if total, bytes := malloced(); total != peak || bytes != 0 {
		t.Fatalf("after flush_all: total_malloced %d, bytes %d; want %d and 0", total, bytes, peak)
	}
	round("big", 10, 4000)
	if total, bytes := malloced(); total < bytes || total <= peak {
		t.Fatalf("holding more than before: total_malloced %d, bytes %d, earlier peak %d", total, bytes, peak)
	}
}

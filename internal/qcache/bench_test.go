package qcache

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/validity"
)

// benchEntry is entry i of a benchmark, shaped like a sysbench point select's: a key of about 60 bytes, a reply
// of 100 to 300, one table dependency (of 8 tables). Each is made anew, as the SQL door makes its key and reply
// (a capture's copy) for each fill.
func benchEntry(i int) (key string, reply []byte, table []validity.TableID) {
	key = "Q!\x00app\x00main\x00sbtest\x00SELECT c FROM sbtest1 WHERE id=" + strconv.Itoa(i)
	reply = make([]byte, 100+(i*37)%201)
	for j := range reply {
		reply[j] = 'x'
	}
	return key, reply, benchTables[i%len(benchTables) : i%len(benchTables)+1]
}

var benchTables = func() (ids []validity.TableID) {
	for i := range 8 {
		ids = append(ids, validity.TableID{Schema: "sbtest", Name: "sbtest" + strconv.Itoa(i+1)})
	}
	return ids
}()

// rss is the process's resident memory (Linux; 0 elsewhere).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// BenchmarkMemory fills a cache with 200,000 small entries and reports what they hold: Go's heap in use and its
// objects (after a collection), the arenas' bytes, the process's resident memory, and one full collection's time
// with them live. Run it once: -bench Memory -benchtime 1x.
func BenchmarkMemory(b *testing.B) {
	const n = 200_000
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rss0 := rss()
		reg := validity.NewRegistry()
		c := New(Options{MemoryLimit: 1 << 30, Registry: reg})
		for i := range n {
			k, reply, table := benchEntry(i)
			if !c.Put(k, reply, 1, c.Begin(table), 0) {
				b.Fatalf("put %d failed", i)
			}
		}
		runtime.GC()
		t := time.Now()
		runtime.GC()
		gc := time.Since(t)
		runtime.ReadMemStats(&after)
		st := c.Stats()
		if st.Entries != n {
			b.Fatalf("%d entries, want %d", st.Entries, n)
		}
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(after.HeapObjects-before.HeapObjects), "heap-objects")
		b.ReportMetric(float64(c.st.Stats().Arena)/(1<<20), "arena-MiB")
		b.ReportMetric(float64(st.Bytes)/(1<<20), "charged-MiB")
		b.ReportMetric(float64(rss()-rss0)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(gc.Microseconds())/1000, "gc-ms")
		runtime.KeepAlive(c)
		c.Close()
	}
}

// BenchmarkGetHit measures a hit: a valid entry of 10,000 copied into the caller's buffer; "written" also copies
// the reply to a write buffer, as the SQL door does (mysqlwire.Conn.WriteCaptured) with every reply it replays.
func BenchmarkGetHit(b *testing.B) {
	const n = 10_000
	c := New(Options{Registry: validity.NewRegistry()})
	defer c.Close()
	bkeys := make([][]byte, n)
	for i := range n {
		k, reply, table := benchEntry(i)
		c.Put(k, reply, 1, c.Begin(table), 0)
		bkeys[i] = []byte(k)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		i := 0
		for b.Loop() {
			r, _, ok := c.Get(nil, bkeys[i%n], buf[:0])
			if !ok {
				b.Fatal("miss")
			}
			buf = r[:0]
			i++
		}
	})
	b.Run("written", func(b *testing.B) {
		b.ReportAllocs()
		var buf, wbuf []byte
		i := 0
		for b.Loop() {
			r, _, ok := c.Get(nil, bkeys[i%n], buf[:0])
			if !ok {
				b.Fatal("miss")
			}
			wbuf = append(wbuf[:0], r...)
			buf = r[:0]
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var buf []byte
			i := 0
			for pb.Next() {
				r, _, ok := c.Get(nil, bkeys[i%n], buf[:0])
				if !ok {
					b.Fatal("miss")
				}
				buf = r[:0]
				i += 7
			}
		})
	})
}

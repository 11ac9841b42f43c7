package container

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/validity"
)

// benchContainer is the demo table on a pool built as keyway builds it (OpenDB: strict mode, client-side
// interpolation), so a benchmark measures the production path: one round trip per statement.
func benchContainer(b *testing.B) *Container {
	b.Helper()
	cfg, err := mysql.ParseDSN(testenv.SharedMariaDB(b).AppDSN)
	if err != nil {
		b.Fatal(err)
	}
	db := OpenDB(cfg)
	b.Cleanup(func() { db.Close() })
	c := demo(b, db, "bench_demo")
	c.opt.PoolDeadline = StatementTimeout // as keyway opens its containers
	return c
}

// opContext is a context like the one keyway's engine gives each table operation.
func opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 10*time.Second)
}

// BenchmarkGet is a single-row get of a key that exists: one SELECT by primary key.
func BenchmarkGet(b *testing.B) {
	c := benchContainer(b)
	key := []byte("bench-key")
	if _, err := c.Set(ctx, key, Item{Value: []byte("forty bytes of value, give or take a few")}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		octx, cancel := opContext()
		if _, ok, err := c.Get(octx, key); !ok || err != nil {
			b.Fatal(ok, err)
		}
		cancel()
	}
}

// BenchmarkSet is a lone writer's set, under a context like the engine's: one autocommit upsert, run unwatched.
func BenchmarkSet(b *testing.B) {
	c := benchContainer(b)
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "bench-%04d", i)
	}
	value := []byte("forty bytes of value, give or take a few")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		octx, cancel := opContext()
		if _, err := c.Set(octx, keys[i%len(keys)], Item{Value: value, Flags: 3}); err != nil {
			b.Fatal(err)
		}
		cancel()
		i++
	}
}

// BenchmarkSet8Writers is the group committer under 8 writers that each send their next Set once the last is answered
// (as 8 PHP workers or gomemcache connections do): ns/op is per Set, rows/stmt how many Sets each statement carried.
func BenchmarkSet8Writers(b *testing.B) {
	c := benchContainer(b)
	value := []byte("forty bytes of value, give or take a few")
	before := c.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	var next atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				octx, cancel := opContext()
				_, err := c.Set(octx, fmt.Appendf(nil, "bench-%04d", i%1000), Item{Value: value, Flags: uint32(i)})
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	s := c.Stats()
	if n := s.Batches - before.Batches; n > 0 {
		b.ReportMetric(float64(s.BatchedSets-before.BatchedSets)/float64(n), "rows/stmt")
	}
}

// BenchmarkDirectReplace is BenchmarkSet's baseline: the same row written by an autocommit REPLACE on the same pool,
// without the container. Each write changes the row (its flags), as each set changes its CAS: a REPLACE or upsert
// that leaves a row as it was is not written at all, and costs MariaDB much less.
func BenchmarkDirectReplace(b *testing.B) {
	c := benchContainer(b)
	value := []byte("forty bytes of value, give or take a few")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := c.db.ExecContext(ctx, "REPLACE INTO test.bench_demo (c1, c2, c3) VALUES (?, ?, ?)", fmt.Sprintf("bench-%04d", i%1000), value, i); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkDirectReplaceWatched is BenchmarkDirectReplace under a context with a deadline, as a caller's usually
// is: go-sql-driver then hands it to a watcher goroutine and back per statement (see unwatched).
func BenchmarkDirectReplaceWatched(b *testing.B) {
	c := benchContainer(b)
	value := []byte("forty bytes of value, give or take a few")
	i := 0
	for b.Loop() {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if _, err := c.db.ExecContext(tctx, "REPLACE INTO test.bench_demo (c1, c2, c3) VALUES (?, ?, ?)", fmt.Sprintf("bench-%04d", i%1000), value, i); err != nil {
			b.Fatal(err)
		}
		cancel()
		i++
	}
}

// BenchmarkWriteRows8 is the statement a full batch of 8 Sets costs: one 8-row upsert, run back to back by one
// caller (ns/op per statement). With BenchmarkSet (one row) it bounds the group committer: 8 writers that each wait
// for their write cannot get more than 8 rows per this statement's time.
func BenchmarkWriteRows8(b *testing.B) { benchmarkWriteRows(b, 8, false) }

// BenchmarkWriteRows256 is a write-behind round's statement (an async container under load writes hundreds of rows
// at a time): its allocations per statement are what the round leaves to the collector.
func BenchmarkWriteRows256(b *testing.B) { benchmarkWriteRows(b, 256, false) }

// BenchmarkWriteDistinctRows256 is that statement as a write-behind round sends it (its rows are distinct rows).
func BenchmarkWriteDistinctRows256(b *testing.B) { benchmarkWriteRows(b, 256, true) }

func benchmarkWriteRows(b *testing.B, n int, distinct bool) {
	c := benchContainer(b)
	write := c.WriteRows
	if distinct {
		write = c.WriteDistinctRows
	}
	value := []byte("forty bytes of value, give or take a few")
	rows := make([]Row, n)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for j := range rows {
			rows[j] = Row{Key: fmt.Appendf(nil, "bench-%04d", (i*n+j)%1000), Item: Item{Value: value, Flags: uint32(i), CAS: uint64(i*n + j + 1)}}
		}
		octx, cancel := opContext()
		for _, err := range write(octx, rows) {
			if err != nil {
				b.Fatal(err)
			}
		}
		cancel()
		i++
	}
}

// BenchmarkSetPosition is the cost of noting each write's position on a group that reads replicas (replicas.go):
// the same sets on a primary with two replicas (binlog on), as a lone writer and as 8 writers, with the position
// noted (the write on a connection held for it, then SELECT @@last_gtid on it) and without (the group reads only
// its primary).
func BenchmarkSetPosition(b *testing.B) {
	r := testenv.NewReplication(b, testenv.ReplicationOptions{})
	cfg, err := mysql.ParseDSN(r.Primary.AppDSN)
	if err != nil {
		b.Fatal(err)
	}
	db := OpenDB(cfg)
	b.Cleanup(func() { db.Close() })
	c := demo(b, db, "bench_position")
	c.opt.PoolDeadline = StatementTimeout
	o := backend.GroupOptions{Name: "main", Primary: backend.Member{Network: "tcp", Address: r.Primary.Addr},
		User: "app", Password: "secret", ReadFrom: backend.ReadReplicas}
	for _, m := range r.Replicas {
		o.Replicas = append(o.Replicas, backend.Replica{Member: backend.Member{Network: "tcp", Address: m.Addr}})
	}
	g := backend.NewGroup(o)
	b.Cleanup(g.Close)
	gate := validity.NewRegistry().Gate("main")
	reps := NewReplicas(g, gate)
	b.Cleanup(func() { reps.Close() })
	value := []byte("forty bytes of value, give or take a few")
	for _, noted := range []bool{false, true} {
		name := "pool"
		if noted {
			name = "last_gtid"
			c.opt.Replicas = reps
		}
		b.Run(name+"/1writer", func(b *testing.B) {
			i := 0
			for b.Loop() {
				octx, cancel := opContext()
				if _, err := c.Set(octx, fmt.Appendf(nil, "bench-%04d", i%1000), Item{Value: value, Flags: uint32(i)}); err != nil {
					b.Fatal(err)
				}
				cancel()
				i++
			}
		})
		b.Run(name+"/8writers", func(b *testing.B) {
			before := c.Stats()
			var wg sync.WaitGroup
			var next atomic.Int64
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						octx, cancel := opContext()
						_, err := c.Set(octx, fmt.Appendf(nil, "bench-%04d", i%1000), Item{Value: value, Flags: uint32(i)})
						cancel()
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if s := c.Stats(); s.Batches > before.Batches {
				b.ReportMetric(float64(s.BatchedSets-before.BatchedSets)/float64(s.Batches-before.Batches), "rows/stmt")
			}
		})
	}
	if gate.Needs(c.ids[:]).IsZero() {
		b.Fatal("the sets noted no position")
	}
}

package container

import (
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/testenv"
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
	return demo(b, db, "bench_demo")
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
		if _, ok, err := c.Get(ctx, key); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkSet is a lone writer's set: through the group committer, one autocommit upsert.
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
		if _, err := c.Set(ctx, keys[i%len(keys)], Item{Value: value, Flags: 3}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkDirectReplace is BenchmarkSet's baseline: the same row written by an autocommit REPLACE on the same pool,
// without the container.
func BenchmarkDirectReplace(b *testing.B) {
	c := benchContainer(b)
	value := []byte("forty bytes of value, give or take a few")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := c.db.ExecContext(ctx, "REPLACE INTO test.bench_demo (c1, c2, c3) VALUES (?, ?, ?)", fmt.Sprintf("bench-%04d", i%1000), value, 3); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

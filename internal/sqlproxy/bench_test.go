package sqlproxy

import (
	"database/sql"
	"testing"

	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/validity"
)

// benchPointSelect runs a prepared point select through db, one connection, as sysbench's oltp_point_select does.
func benchPointSelect(b *testing.B, db *sql.DB) {
	b.Helper()
	db.SetMaxOpenConns(1)
	stmt, err := db.Prepare("SELECT c FROM bench_point WHERE id = ?")
	if err != nil {
		b.Fatal(err)
	}
	defer stmt.Close()
	var c string
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := stmt.QueryRow(1 + i%100).Scan(&c); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func benchTable(b *testing.B, db *sql.DB) {
	b.Helper()
	mustExec(b, db, "DROP TABLE IF EXISTS bench_point")
	mustExec(b, db, "CREATE TABLE bench_point (id INT PRIMARY KEY, c CHAR(120))")
	for i := 1; i <= 100; i++ {
		mustExec(b, db, "INSERT INTO bench_point VALUES (?, REPEAT('x', 120))", i)
	}
}

// BenchmarkPointSelectDirect is the baseline: the client straight to MariaDB.
func BenchmarkPointSelectDirect(b *testing.B) {
	m := mariadb(b)
	db := open(b, "app", "secret", m.Addr, "")
	benchTable(b, db)
	benchPointSelect(b, db)
}

// BenchmarkPointSelectRelay is the SQL door as a relay (no result cache): per statement, the plan lookup, the
// packet relay both ways and the digest statistics.
func BenchmarkPointSelectRelay(b *testing.B) {
	db, _, _ := proxyDB(b, "")
	benchTable(b, db)
	benchPointSelect(b, db)
}

// BenchmarkPointSelectCached is the SQL door answering from its result cache (every key is hot after the first
// round).
func BenchmarkPointSelectCached(b *testing.B) {
	m := mariadb(b)
	reg := validity.NewRegistry()
	cache := qcache.New(qcache.Options{Registry: reg})
	_, addr := startProxyOpts(b, testConfig(m.Addr).with(b, func(o *Options) { o.Validity, o.Cache = reg, cache }))
	db := open(b, "app", "secret", addr, "")
	benchTable(b, db)
	benchPointSelect(b, db)
	if cache.Stats().Hits == 0 {
		b.Fatal("no cache hits: the benchmark did not measure the cached path")
	}
}

package sqlproxy

import (
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/digests"
)

// BenchmarkStatementOverhead is the SQL door's per-statement bookkeeping for a text query on a warm plan cache:
// the plan lookup and the digest statistics row, without any I/O.
func BenchmarkStatementOverhead(b *testing.B) {
	pc := NewPlanCache(1000)
	d := digests.New(1000)
	const sql = "SELECT c FROM sbtest1 WHERE id = 4711"
	pc.Plan(sql)
	b.ReportAllocs()
	for b.Loop() {
		p := pc.Plan(sql)
		d.Record(digests.Key{Fingerprint: p.Fingerprint, Digest: p.Digest, Normalized: p.Normalized, Class: p.Class.String(), Schema: "sbtest", User: "app"},
			1, time.Microsecond, false)
	}
}

package sqlproxy

import (
	"encoding/binary"
	"testing"

	"github.com/keywaydb/keyway/internal/shard"
)

// BenchmarkRoute is the router's cost per statement (issue 42's target): the shard of a point statement on a
// table of a four-shard xxhash mapping, from a text statement's literal and from an execute's parameter, the plan
// already cached (as it is after a statement's first run).
func BenchmarkRoute(b *testing.B) {
	m, err := shard.FromConfig(shard.Config{Global: "global", Mappings: []shard.MappingConfig{{
		Name: "users", Kind: "xxhash", Tables: []shard.TableConfig{{Table: "test.users", Column: "id"}},
		Shards: []shard.ShardConfig{{Name: "-40", Group: "s1"}, {Name: "40-80", Group: "s2"}, {Name: "80-c0", Group: "s3"}, {Name: "c0-", Group: "s4"}},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	pc := NewPlanCache(100)
	b.Run("text", func(b *testing.B) {
		sql := "UPDATE users SET name = 'x' WHERE id = 123456"
		plan := pc.Plan(sql)
		b.ReportAllocs()
		for b.Loop() {
			rv := routeValues{sql: sql, plans: pc}
			if route, e := routeShard(m, plan, "test", &rv); route.one == nil || e != nil {
				b.Fatal(e)
			}
		}
	})
	b.Run("execute", func(b *testing.B) {
		plan := pc.Plan("UPDATE users SET name = ? WHERE id = ?")
		st := &prepared{plan: plan, params: 2}
		// null bitmap, types (VARCHAR, LONGLONG), values ('x', 123456)
		params := []byte{0, 0x0f, 0, 0x08, 0, 1, 'x'}
		params = binary.LittleEndian.AppendUint64(params, 123456)
		b.ReportAllocs()
		for b.Loop() {
			rv := routeValues{st: st, params: params, plans: pc}
			if route, e := routeShard(m, plan, "test", &rv); route.one == nil || e != nil {
				b.Fatal(e)
			}
		}
	})
}

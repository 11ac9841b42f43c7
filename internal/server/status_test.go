package server

import (
	"encoding/json"
	"regexp"
	"slices"
	"testing"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/binlog"
	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// TestStatusNaming: /status, with every section present, names everything in lower_snake_case and holds no
// bit mask: a pool's capabilities are listed by name.
func TestStatusNaming(t *testing.T) {
	pool := poolStatus(backend.PoolStats{Group: "main", Address: "127.0.0.1:3306", User: "app",
		Caps: mysqlwire.ClientDeprecateEOF | mysqlwire.ClientMultiResults, Open: 2, Idle: 1, InUse: 1})
	if want := []string{"CLIENT_MULTI_RESULTS", "CLIENT_DEPRECATE_EOF"}; !slices.Equal(pool.Capabilities, want) {
		t.Fatalf("capabilities %q, want %q", pool.Capabilities, want)
	}
	st := Status{
		Memcache:   MemcacheStatus{Listen: "127.0.0.1:11211", Stats: map[string]int64{"curr_items": 1}},
		Store:      StoreStatus{DataDir: "/d", Durability: "async"},
		Groups:     []GroupStatus{{Name: "main", Primary: "127.0.0.1:3306", LastError: "down", CacheMode: "off", CacheReason: "no binlog"}},
		SQL:        &SQLStatus{Listen: "127.0.0.1:3307", Pools: []PoolStatus{pool}},
		Containers: map[string]engine.ContainerStatus{"kv": {Table: "test.kv", WriteBehind: &writebehind.Stats{}}},
		Binlog:     []binlog.Status{{Group: "main", GTID: "0-1-1", LastErr: "x"}},
		SQLCache:   &qcache.Stats{},
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	keys := 0
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				keys++
				if !snake.MatchString(k) && path != ".containers" { // container names are the user's
					t.Errorf("/status key %s.%s is not lower_snake_case", path, k)
				}
				walk(e, path+"."+k)
			}
		case []any:
			for _, e := range v {
				walk(e, path+"[]")
			}
		}
	}
	walk(v, "")
	if keys < 60 {
		t.Fatalf("only %d keys seen: %s", keys, b)
	}
}

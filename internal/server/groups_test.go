package server

import (
	"reflect"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/config"
)

// TestGroupOptionsReplicas: [[groups]] replicas, read_from and max_replica_lag reach backend.GroupOptions.
func TestGroupOptionsReplicas(t *testing.T) {
	cfg, err := config.Parse([]byte(`
[[groups]]
name = "g"
primary = "10.0.0.5:3306"
user = "m"
replicas = ["10.0.0.6:3306", { address = "/run/mysqld/r.sock", weight = 3 }]
read_from = "replicas"
max_replica_lag = "300ms"
[[groups]]
name = "h"
primary = "10.0.0.7:3306"
user = "m"
`))
	if err != nil {
		t.Fatal(err)
	}
	opts := groupOptions(cfg, nil)
	want := []backend.Replica{
		{Member: backend.Member{Network: "tcp", Address: "10.0.0.6:3306"}, Weight: 1},
		{Member: backend.Member{Network: "unix", Address: "/run/mysqld/r.sock"}, Weight: 3},
	}
	if g := opts[0]; !reflect.DeepEqual(g.Replicas, want) || g.ReadFrom != backend.ReadReplicas || g.MaxReplicaLag != 300*time.Millisecond {
		t.Errorf("group g: replicas %+v, read_from %q, max_replica_lag %v", g.Replicas, g.ReadFrom, g.MaxReplicaLag)
	}
	if h := opts[1]; h.Replicas != nil || h.ReadFrom != backend.ReadPrimary || h.MaxReplicaLag != time.Second {
		t.Errorf("group h (no replicas): replicas %+v, read_from %q, max_replica_lag %v (want cache.max_staleness)", h.Replicas, h.ReadFrom, h.MaxReplicaLag)
	}
}

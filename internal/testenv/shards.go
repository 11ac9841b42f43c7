package testenv

import (
	"context"
	"testing"

	"github.com/keywaydb/keyway/internal/peers"
)

// Shards is a global MariaDB and n shard MariaDBs, as package peers defines them.
type Shards = peers.Shards

// StartShards is peers.StartShards.
var StartShards = peers.StartShards

// NewShards starts a global MariaDB and n shard MariaDBs for the test (see peers.Shards: private data directories,
// free loopback ports, binlog on) and stops them at cleanup. It fails the test when MariaDB is missing or a server
// does not start.
func NewShards(t testing.TB, n int) *Shards {
	t.Helper()
	Need(t, "mariadb-install-db")
	Need(t, "mariadbd")
	s, err := StartShards(context.Background(), n)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return s
}

package testenv

import (
	"testing"
)

// TestShards: a global server and three shards, each its own server (server_id 1…4, binlog on); a row written on
// one is on no other.
func TestShards(t *testing.T) {
	s := NewShards(t, 3)
	ctx := t.Context()
	if len(s.Shards) != 3 || len(s.All()) != 4 {
		t.Fatalf("%d shards, %d servers", len(s.Shards), len(s.All()))
	}
	ports := map[int]bool{}
	for i, m := range s.All() {
		db := open(t, m.AppDSN)
		var id, logBin int
		var format string
		if err := db.QueryRowContext(ctx, "SELECT @@server_id, @@log_bin, @@binlog_format").Scan(&id, &logBin, &format); err != nil {
			t.Fatal(err)
		}
		if id != i+1 || logBin != 1 || format != "ROW" || ports[m.Port] {
			t.Errorf("server %d (%s): server_id %d, log_bin %d, binlog_format %s", i, m.Addr, id, logBin, format)
		}
		ports[m.Port] = true
		mustExec(t, db, "CREATE TABLE t (k INT PRIMARY KEY, v VARCHAR(20))")
	}
	mustExec(t, open(t, s.Shards[1].AppDSN), "INSERT INTO t VALUES (1, 'one')")
	for i, m := range s.All() {
		if v, want := value(t, m, 1), map[bool]string{true: "one"}[i == 2]; v != want {
			t.Errorf("server %d has k=1 %q, want %q", i, v, want)
		}
	}
}

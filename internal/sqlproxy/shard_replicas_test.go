package sqlproxy

import (
	"context"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/validity"
)

// TestShardReplicaReads: a shard is a group like any other, so a shard group with replicas and read_from = replicas
// serves its shard's reads from its replicas, text and prepared, and its writes on its primary; a read after a write
// through keyway sees the write. The global group (the same primary, no replicas) reads from the primary.
func TestShardReplicaReads(t *testing.T) {
	r := testenv.NewReplication(t, testenv.ReplicationOptions{})
	ctx := context.Background()
	p := openDSN(t, r.Primary.AppDSN)
	mustExec(t, p, "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
	mustExec(t, p, "CREATE TABLE settings (k VARCHAR(32) PRIMARY KEY, v VARCHAR(32))")
	if err := r.Sync(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// Each server's own user 1 and setting, written outside the binlog: a read says which server answered it.
	for i, m := range r.Members() {
		name := "primary"
		if i > 0 {
			name = "replica" + string(rune('0'+i))
		}
		for _, q := range []string{"REPLACE INTO test.users VALUES (1, '" + name + "')", "REPLACE INTO test.settings VALUES ('who', '" + name + "')"} {
			if err := m.ExecUnlogged(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	m, err := shard.FromConfig(shard.Config{Global: "global", Mappings: []shard.MappingConfig{{
		Name: "users", Kind: "xxhash", Tables: []shard.TableConfig{{Table: "test.users", Column: "id"}},
		Shards: []shard.ShardConfig{{Name: "-", Group: "s1"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	holder := &shard.Holder{}
	if _, err := holder.Store(m); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(r.Primary.Addr)
	cfg.Groups[0].Name = "global"
	s1 := cfg.Groups[0]
	s1.Name = "s1"
	for _, rm := range r.Replicas {
		s1.Replicas = append(s1.Replicas, backend.Replica{Member: backend.Member{Network: "tcp", Address: rm.Addr}})
	}
	s1.ReadFrom = backend.ReadReplicas
	s1.MaxReplicaLag = time.Minute // a slow machine's test must not make a replica ineligible
	s1.ReplicationUser, s1.ReplicationPassword = "repl", "repl"
	cfg.Groups = append(cfg.Groups, s1)
	reg := validity.NewRegistry()
	reg.Gate("global")
	reg.Gate("s1")
	srv, addr := startProxyOpts(t, cfg.with(t, func(o *Options) {
		o.Validity = reg
		o.Shards = holder
	}))
	var g *backend.Group
	for _, x := range srv.groups {
		if x.Name() == "s1" {
			g = x
		}
	}
	waitMembersKnown(t, g)
	db := open(t, "app", "secret", addr, "")
	stmt, err := db.Prepare("SELECT name FROM users WHERE id = ?")
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	seen := map[string]int{}
	for i := range 60 {
		var name string
		if i%2 == 0 {
			err = db.QueryRow("SELECT name FROM users WHERE id = 1").Scan(&name)
		} else {
			err = stmt.QueryRow(1).Scan(&name)
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[name]++
	}
	if seen["replica1"] == 0 || seen["replica2"] == 0 || seen["primary"] != 0 {
		t.Errorf("reads of the shard's table by key, read_from = replicas: %v (want both replicas, never the primary)", seen)
	}
	var who string
	if err := db.QueryRow("SELECT v FROM settings WHERE k = 'who'").Scan(&who); err != nil || who != "primary" {
		t.Errorf("a read of a global table was answered by %q (err %v), want the global group's primary", who, err)
	}
	// A write goes to the shard's primary, and a read after it sees it, wherever it runs.
	for i := range 5 {
		id, name := 100+i, "n"+string(rune('a'+i))
		mustExec(t, db, "INSERT INTO users (id, name) VALUES (?, ?)", id, name)
		var got string
		if err := openDSN(t, r.Primary.AppDSN).QueryRow("SELECT name FROM users WHERE id = ?", id).Scan(&got); err != nil || got != name {
			t.Fatalf("user %d on the primary: %q, %v", id, got, err)
		}
		if err := stmt.QueryRow(id).Scan(&got); err != nil || got != name {
			t.Fatalf("user %d read back through keyway: %q, %v (want %q)", id, got, err, name)
		}
	}
}

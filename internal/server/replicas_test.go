package server

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	_ "github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/engine"
	kmemcache "github.com/keywaydb/keyway/internal/memcache"
	"github.com/keywaydb/keyway/internal/sqlproxy"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/validity"
)

// replicaDoors is keyway's two doors in front of a MariaDB primary with two replicas, on a group with
// read_from = "replicas": containers opened as the server opens them (openContainers), the memcache door and the SQL
// door sharing one validity registry. (The config file has no replicas yet, so the group is built here.) Table kv
// backs the containers; whoami holds a different row on each server (written outside the binlog), and so does kv's
// row "whoami", so a read says which server answered it.
type replicaDoors struct {
	repl  *testenv.Replication
	names map[string]string // server address → name
	mc    *memcache.Client
	sql   *sql.DB
	group *backend.Group
}

func newReplicaDoors(t *testing.T) *replicaDoors {
	t.Helper()
	r := testenv.NewReplication(t, testenv.ReplicationOptions{})
	ctx := context.Background()
	p := openTestDB(t, r.Primary.AppDSN)
	for _, q := range []string{
		"CREATE TABLE kv (k VARCHAR(64) PRIMARY KEY, v VARCHAR(255) NOT NULL)",
		"CREATE TABLE whoami (id INT PRIMARY KEY, name VARCHAR(20))",
	} {
		if _, err := p.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := r.Sync(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	d := &replicaDoors{repl: r, names: map[string]string{}}
	for i, m := range r.Members() {
		name := "primary"
		if i > 0 {
			name = fmt.Sprintf("replica%d", i)
		}
		d.names[m.Addr] = name
		if err := m.ExecUnlogged(ctx, "REPLACE INTO test.whoami VALUES (1, '"+name+"')",
			"REPLACE INTO test.kv VALUES ('whoami', '"+name+"')"); err != nil {
			t.Fatal(err)
		}
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	g := backend.GroupOptions{Name: "main", Primary: backend.Member{Network: "tcp", Address: r.Primary.Addr},
		User: "app", Password: "secret", HealthInterval: 100 * time.Millisecond, ConnectTimeout: 2 * time.Second,
		ReadFrom: backend.ReadReplicas, MaxReplicaLag: time.Minute, Logger: log}
	for _, m := range r.Replicas {
		g.Replicas = append(g.Replicas, backend.Replica{Member: backend.Member{Network: "tcp", Address: m.Addr}})
	}
	topo, err := backend.NewTopology([]backend.GroupOptions{g})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(topo.Close)
	d.group = topo.Group("main")
	reg := validity.NewRegistry()
	st, err := store.Open(store.Options{MemoryLimit: 64 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := engine.New(st, engine.Options{Validity: reg})
	var cfg config.Config
	for _, c := range []config.Container{
		{Name: "dbonly", Get: "db_only", Set: "db_only", Delete: "db_only", Write: "sync"},
		{Name: "caching", Get: "caching", Set: "caching", Delete: "caching", Write: "sync"},
		{Name: "async", Get: "db_only", Set: "db_only", Delete: "db_only", Write: "async", WriteWindow: 50 * time.Millisecond, WriteMaxPending: 1024},
	} {
		c.Group, c.Table, c.Key, c.Values, c.Flush = "main", "test.kv", "k", []string{"v"}, "cache_only"
		cfg.Containers = append(cfg.Containers, c)
	}
	cs, err := openContainers(ctx, cfg, eng, topo, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.close() })
	eng.SetContainers(cs.tables, cs.defaultName)

	mcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mc := kmemcache.NewServer(eng, kmemcache.Options{Logger: log})
	go mc.Serve(mcLn)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		mc.Shutdown(ctx)
	})
	proxy, err := sqlproxy.New(sqlproxy.Options{Topology: topo, Validity: reg, Logger: log,
		Users: []sqlproxy.User{{Name: "app", Password: "secret", AuthPlugin: "mysql_native_password"}}})
	if err != nil {
		t.Fatal(err)
	}
	sqlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go proxy.Serve(sqlLn)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		proxy.Shutdown(ctx)
	})
	d.mc = memcache.New(mcLn.Addr().String())
	d.mc.Timeout = 10 * time.Second
	d.sql = openTestDB(t, "app:secret@tcp("+sqlLn.Addr().String()+")/test")

	deadline := time.Now().Add(10 * time.Second)
	for {
		known := 0
		for _, m := range d.group.Members() {
			if m.Known && m.Up {
				known++
			}
		}
		if known == 1+len(r.Replicas) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the position watcher does not know every member: %+v", d.group.Members())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return d
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func openTestDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

const readKV = "SELECT w.name, t.v FROM kv t JOIN whoami w ON w.id = 1 WHERE t.k = ?"

// TestContainerWritesSeenOnReplicas: a set through the memcache door, acknowledged, is seen at once by a SELECT
// through the SQL door, whichever server answers, with one replica's SQL thread stopped (so a read that went there
// would miss it): for a sync write (its GTID noted before the set is acknowledged) and a write-behind one (the SQL
// door settles the table, and the queue's write notes its GTID, before the read picks a server).
func TestContainerWritesSeenOnReplicas(t *testing.T) {
	d := newReplicaDoors(t)
	behind := d.repl.Replicas[0]
	if err := behind.StopSQLThread(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dbonly", "caching", "async"} {
		t.Run(name, func(t *testing.T) {
			seen := map[string]int{}
			for i := range 50 {
				key := "k-" + name
				want := fmt.Sprintf("%s-%d", name, i)
				if err := d.mc.Set(&memcache.Item{Key: "@@" + name + "." + key, Value: []byte(want)}); err != nil {
					t.Fatalf("set %d: %v", i, err)
				}
				var server, got string
				if err := d.sql.QueryRow(readKV, key).Scan(&server, &got); err != nil {
					t.Fatalf("select %d: %v", i, err)
				}
				seen[server]++
				if got != want {
					t.Fatalf("after set %q through the memcache door, a SELECT through the SQL door answered by %s reads %q", want, server, got)
				}
				if server == d.names[behind.Addr] {
					t.Fatalf("the replica with its SQL thread stopped answered a read of kv, written since")
				}
			}
			t.Logf("SELECTs after each set: %v", seen)
		})
	}
}

// TestSQLWritesSeenByContainerReads: an UPDATE through the SQL door is seen at once by a get through the memcache
// door on a db_only container (and a caching one, whose group here vouches for no copy, so it reads the table),
// with one replica's SQL thread stopped.
func TestSQLWritesSeenByContainerReads(t *testing.T) {
	d := newReplicaDoors(t)
	if _, err := d.sql.Exec("INSERT INTO kv VALUES ('k-sql', 'start')"); err != nil {
		t.Fatal(err)
	}
	behind := d.repl.Replicas[0]
	if err := behind.StopSQLThread(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := d.reads()
	for i := range 50 {
		want := fmt.Sprintf("sql-%d", i)
		if _, err := d.sql.Exec("UPDATE kv SET v = ? WHERE k = 'k-sql'", want); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"dbonly", "caching"} {
			it, err := d.mc.Get("@@" + name + ".k-sql")
			if err != nil {
				t.Fatalf("get %d through %s: %v", i, name, err)
			}
			if string(it.Value) != want {
				t.Fatalf("after UPDATE to %q through the SQL door, a get through container %s reads %q", want, name, it.Value)
			}
		}
	}
	after := d.reads()
	if n := after[behind.Addr] - before[behind.Addr]; n != 0 {
		t.Errorf("the replica with its SQL thread stopped took %d reads of kv, written through the SQL door since", n)
	}
}

// TestContainerReadsGoToReplicas: with nothing written, gets through the memcache door are answered by the
// replicas (kv's row "whoami" differs per server), both of them and never the primary; once the containers' table
// is written through the memcache door, reads of it avoid a replica that has not applied the write.
func TestContainerReadsGoToReplicas(t *testing.T) {
	d := newReplicaDoors(t)
	for _, name := range []string{"dbonly", "caching"} {
		seen := map[string]int{}
		for range 60 {
			it, err := d.mc.Get("@@" + name + ".whoami")
			if err != nil {
				t.Fatalf("get through %s: %v", name, err)
			}
			seen[string(it.Value)]++
		}
		if seen["replica1"] == 0 || seen["replica2"] == 0 || seen["primary"] != 0 {
			t.Errorf("gets through %s, by server that answered: %v; want both replicas and not the primary", name, seen)
		}
		items, err := d.mc.GetMulti([]string{"@@" + name + ".whoami", "@@" + name + ".none"})
		if err != nil {
			t.Fatal(err)
		}
		if it := items["@@"+name+".whoami"]; it == nil || string(it.Value) == "primary" {
			t.Errorf("a multi-get through %s was answered by the primary, or not at all: %v", name, it)
		}
	}
	// A write through the memcache door: the stopped replica no longer takes reads of kv.
	behind := d.repl.Replicas[0]
	if err := behind.StopSQLThread(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := d.mc.Set(&memcache.Item{Key: "@@dbonly.other", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	// Until the other replica's position is read past the write (every 100 ms), the primary answers.
	seen := map[string]int{}
	other := d.names[d.repl.Replicas[1].Addr]
	for deadline := time.Now().Add(10 * time.Second); seen[other] < 20 && time.Now().Before(deadline); {
		it, err := d.mc.Get("@@dbonly.whoami")
		if err != nil {
			t.Fatal(err)
		}
		seen[string(it.Value)]++
	}
	if seen[d.names[behind.Addr]] != 0 || seen[other] < 20 {
		t.Errorf("gets of kv after a write the stopped replica lacks, by server: %v; want none from %s and 20 from %s", seen, d.names[behind.Addr], other)
	}
}

// reads is how many reads the group's position routing sent to each member, by address.
func (d *replicaDoors) reads() map[string]int64 {
	out := map[string]int64{}
	for _, m := range d.group.Members() {
		out[m.Address] = m.Reads
	}
	return out
}

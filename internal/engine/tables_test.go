package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/writebehind"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedMariaDB(m)) }

// TestQueuedRowsOutliveADeadTable: with the table unreachable, an async
// container still acknowledges sets, and reads (single and multi-key) answer
// the queued rows; only the rows that need the table fail, with the reason.
func TestQueuedRowsOutliveADeadTable(t *testing.T) {
	live := testenv.SharedDB(t)
	for _, q := range []string{"DROP TABLE IF EXISTS test.engine_dead",
		"CREATE TABLE test.engine_dead (k VARCHAR(32) PRIMARY KEY, v VARCHAR(64))"} {
		if _, err := live.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("mysql", testenv.SharedMariaDB(t).AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.Open(context.Background(), db, container.Def{Name: "dead", Schema: "test", Table: "engine_dead",
		KeyColumn: "k", ValueColumns: []string{"v"}}, container.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db.Close() // every query now fails at once, as with MySQL gone
	st, err := store.Open(store.Options{MemoryLimit: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := New(st, Options{})
	for _, policy := range []container.Policy{container.Caching, container.DBOnly} {
		tbl := e.NewContainer(ContainerOptions{Container: c,
			Policies:    container.Policies{Get: policy, Set: policy, Delete: policy, Flush: container.CacheOnly},
			WriteBehind: &writebehind.Options{Window: time.Hour, WaitTimeout: 100 * time.Millisecond}})
		e.SetContainers([]*Table{tbl}, "default")
		if status, _, err := e.StoreValue([]byte("@@dead.q"), []byte("queued"), StoreRequest{}); status != Stored || err != nil {
			t.Fatalf("%s: async set with the table dead: %v %v", policy, status, err)
		}
		if it, ok, err := e.Get([]byte("@@dead.q")); !ok || err != nil || string(it.Value) != "queued" {
			t.Fatalf("%s: get: %q %v %v", policy, it.Value, ok, err)
		}
		items, found, err := e.GetMulti([][]byte{[]byte("@@dead.q"), []byte("@@dead.other")})
		if !found[0] || string(items[0].Value) != "queued" || found[1] || err == nil {
			t.Fatalf("%s: multi-get: %v %v, err %v", policy, found, items, err)
		}
		if _, err := e.Delete([]byte("@@dead.q"), DeleteRequest{}); err == nil {
			t.Fatalf("%s: delete acknowledged while its queued set cannot reach the table", policy)
		}
		tbl.Behind.Close() // leaves the row queued: the table is dead
	}
}

// TestStatusChecked: /status says whether a container checked its table: a
// container whose backend cannot be reached reports checked false, one on a
// reachable table true.
func TestStatusChecked(t *testing.T) {
	live := testenv.SharedDB(t)
	for _, q := range []string{"DROP TABLE IF EXISTS test.engine_checked",
		"CREATE TABLE test.engine_checked (k VARCHAR(32) PRIMARY KEY, v VARCHAR(64))"} {
		if _, err := live.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	def := container.Def{Name: "chk", Schema: "test", Table: "engine_checked", KeyColumn: "k", ValueColumns: []string{"v"}}
	up, err := container.Open(context.Background(), live, def, container.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	port, err := testenv.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(testenv.SharedMariaDB(t).AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	db := container.OpenDB(cfg)
	defer db.Close()
	down, err := container.Open(context.Background(), db, def, container.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	st, err := store.Open(store.Options{MemoryLimit: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := New(st, Options{})
	p := container.Policies{Get: container.DBOnly, Set: container.DBOnly, Delete: container.DBOnly, Flush: container.CacheOnly}
	if s := e.NewContainer(ContainerOptions{Container: up, Policies: p}).Status(); !s.Checked {
		t.Errorf("status of a container on a reachable table: %+v, want checked", s)
	}
	s := e.NewContainer(ContainerOptions{Container: down, Policies: p}).Status()
	if s.Checked {
		t.Errorf("status of a container whose backend is down: %+v, want not checked", s)
	}
	if b, err := json.Marshal(s); err != nil || !strings.Contains(string(b), `"checked":false`) {
		t.Errorf("status JSON %s (%v), want \"checked\":false", b, err)
	}
}

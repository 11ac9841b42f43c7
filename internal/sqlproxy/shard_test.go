package sqlproxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/testenv"
	"github.com/keywaydb/keyway/internal/validity"
)

// shardFarm is a global server and two shards behind one keyway SQL door with a shard map: test.users by id and
// events by user_id, which allows scatter (xxhash, -80 on s1, 80- on s2), test.accounts by name (range_string, ["", "m") on s1, ["m", …) on s2); other
// orders by id (Vitess's hash, -80 on s1, 80- on s2); other tables are global.
type shardFarm struct {
	farm   *testenv.Shards
	m      *shard.Map
	direct map[string]*sql.DB // group name → a direct connection to its server
	proxy  *sql.DB
	addr   string
	holder *shard.Holder
	srv    *Server
}

func newShardFarm(t *testing.T, tweak ...func(*Options)) *shardFarm {
	t.Helper()
	farm := testenv.NewShards(t, 2)
	f := &shardFarm{farm: farm, direct: map[string]*sql.DB{}}
	names := []string{"global", "s1", "s2"}
	var groups []backend.GroupOptions
	for i, m := range farm.All() {
		db := open(t, "app", "secret", m.Addr, "multiStatements=true")
		f.direct[names[i]] = db
		groups = append(groups, backend.GroupOptions{
			Name: names[i], Primary: backend.Member{Network: "tcp", Address: m.Addr}, User: "app", Password: "secret",
			HealthInterval: 100 * time.Millisecond, ConnectTimeout: 2 * time.Second, MaxOpen: 4,
		})
		if i == 0 {
			mustExec(t, db, "CREATE TABLE settings (k VARCHAR(32) PRIMARY KEY, v INT)")
		} else {
			mustExec(t, db, "CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(32))")
			mustExec(t, db, "CREATE TABLE accounts (name VARCHAR(32) PRIMARY KEY, balance INT)")
			mustExec(t, db, "CREATE TABLE events (id INT PRIMARY KEY, user_id BIGINT, what VARCHAR(20))")
			mustExec(t, db, "CREATE TABLE orders (id BIGINT UNSIGNED PRIMARY KEY, total INT)")
		}
	}
	m, err := shard.FromConfig(shard.Config{Global: "global", Mappings: []shard.MappingConfig{
		{Name: "users", Kind: "xxhash", Tables: []shard.TableConfig{{Table: "test.users", Column: "id"}, {Table: "events", Column: "user_id", Scatter: true}},
			Shards: []shard.ShardConfig{{Name: "-80", Group: "s1"}, {Name: "80-", Group: "s2"}}},
		{Name: "orders", Kind: "hash", Tables: []shard.TableConfig{{Table: "orders", Column: "id"}},
			Shards: []shard.ShardConfig{{Name: "-80", Group: "s1"}, {Name: "80-", Group: "s2"}}},
		{Name: "accounts", Kind: "range_string", Tables: []shard.TableConfig{{Table: "accounts", Column: "name"}},
			Shards: []shard.ShardConfig{{Name: "a-l", Group: "s1", To: "m"}, {Name: "m-z", Group: "s2", From: "m"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	f.holder = &shard.Holder{}
	if _, err := f.holder.Store(m); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("")
	cfg.Groups = groups
	f.srv, f.addr = startProxyOpts(t, cfg.with(t, func(o *Options) {
		o.Shards = f.holder
		for _, tw := range tweak {
			tw(o)
		}
	}))
	f.proxy = open(t, "app", "secret", f.addr, "")
	return f
}

// groupOf is the group the map puts table's row with key v on.
func (f *shardFarm) groupOf(t *testing.T, table, v string, str bool) string {
	t.Helper()
	sh, err := f.m.Table("test", table).ShardOf([]byte(v), str)
	if err != nil {
		t.Fatal(err)
	}
	return sh.Group
}

// where returns the groups whose server holds the row of table with key column = v.
func (f *shardFarm) where(t *testing.T, table, column string, v any) []string {
	t.Helper()
	var at []string
	for _, g := range []string{"global", "s1", "s2"} {
		var n int
		err := f.direct[g].QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'test' AND table_name = '%s'", table)).Scan(&n)
		if err != nil || n == 0 {
			continue
		}
		if err := f.direct[g].QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE %s = ?", table, column), v).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			at = append(at, g)
		}
	}
	return at
}

func TestShardRouting(t *testing.T) {
	f := newShardFarm(t)
	db := f.proxy
	onShards := map[string]int{}
	// Text and prepared INSERTs land on the shard the map names, and read back through keyway.
	ins, err := db.Prepare("INSERT INTO users (id, name) VALUES (?, ?)")
	if err != nil {
		t.Fatal(err)
	}
	defer ins.Close()
	for id := 1; id <= 40; id++ {
		if id%2 == 0 {
			mustExec(t, db, fmt.Sprintf("INSERT INTO users (id, name) VALUES (%d, 'u%d')", id, id))
		} else if _, err := ins.Exec(id, fmt.Sprintf("u%d", id)); err != nil {
			t.Fatal(err)
		}
		want := f.groupOf(t, "users", strconv.Itoa(id), false)
		onShards[want]++
		if at := f.where(t, "users", "id", id); len(at) != 1 || at[0] != want {
			t.Fatalf("user %d is on %v, want %s", id, at, want)
		}
	}
	if onShards["s1"] == 0 || onShards["s2"] == 0 {
		t.Fatalf("the 40 ids all hash to one shard: %v", onShards)
	}
	sel, err := db.Prepare("SELECT name FROM users WHERE id = ?")
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	for id := 1; id <= 40; id++ {
		var text, prep string
		if err := db.QueryRow(fmt.Sprintf("SELECT name FROM users WHERE id = %d AND name LIKE 'u%%'", id)).Scan(&text); err != nil {
			t.Fatalf("text select %d: %v", id, err)
		}
		if err := sel.QueryRow(id).Scan(&prep); err != nil {
			t.Fatalf("prepared select %d: %v", id, err)
		}
		if text != fmt.Sprintf("u%d", id) || prep != text {
			t.Fatalf("user %d: text %q prepared %q", id, text, prep)
		}
	}
	// UPDATE and DELETE by key.
	mustExec(t, db, "UPDATE users SET name = 'seven' WHERE id = 7")
	var name string
	if err := f.direct[f.groupOf(t, "users", "7", false)].QueryRow("SELECT name FROM users WHERE id = 7").Scan(&name); err != nil || name != "seven" {
		t.Fatalf("after the update, user 7 is %q (%v)", name, err)
	}
	if _, err := db.Exec("DELETE FROM users WHERE id = ?", 8); err != nil {
		t.Fatal(err)
	}
	if at := f.where(t, "users", "id", 8); len(at) != 0 {
		t.Fatalf("user 8 still on %v after its delete", at)
	}
	// IN on one shard: allowed. The hint routes what the text does not say.
	var a, b int
	for id := 2; id <= 40; id++ {
		if f.groupOf(t, "users", "1", false) == f.groupOf(t, "users", strconv.Itoa(id), false) {
			a, b = 1, id
			break
		}
	}
	var n int
	if err := db.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM users WHERE id IN (%d, %d)", a, b)).Scan(&n); err != nil || n != 2 {
		t.Fatalf("IN on one shard: %d rows, %v", n, err)
	}
	// The same statement shape with a longer IN list (one plan: the list collapses in the digest) is routed by its
	// own values: one on the other shard makes it refused, never answered from the first shard alone.
	var far int
	for id := 2; id <= 40; id++ {
		if f.groupOf(t, "users", "1", false) != f.groupOf(t, "users", strconv.Itoa(id), false) {
			far = id
			break
		}
	}
	_, err = db.Exec(fmt.Sprintf("SELECT COUNT(*) FROM users WHERE id IN (%d, %d, %d)", a, b, far))
	wantRefusal(t, err, "are on several shards")
	if err := db.QueryRow("SELECT /*+ keyway shard_key=1 */ COUNT(*) FROM users").Scan(&n); err != nil || n != onShards[f.groupOf(t, "users", "1", false)] {
		t.Fatalf("hinted count: %d, %v; want the shard's %d", n, err, onShards[f.groupOf(t, "users", "1", false)])
	}
	// A range_string mapping, by string literal and parameter.
	for _, acct := range []string{"alice", "mallory", "zed", "bob"} {
		if _, err := db.Exec("INSERT INTO accounts (name, balance) VALUES (?, 10)", acct); err != nil {
			t.Fatal(err)
		}
		mustExec(t, db, fmt.Sprintf("UPDATE accounts SET balance = balance + 1 WHERE name = '%s'", acct))
		want := "s1"
		if acct >= "m" {
			want = "s2"
		}
		if at := f.where(t, "accounts", "name", acct); len(at) != 1 || at[0] != want {
			t.Fatalf("account %s is on %v, want %s", acct, at, want)
		}
	}
	// Vitess's hash (DES) mapping, text and prepared.
	seen := map[string]bool{}
	for id := 1; id <= 20; id++ {
		if id%2 == 0 {
			mustExec(t, db, fmt.Sprintf("INSERT INTO orders (id, total) VALUES (%d, 1)", id))
		} else if _, err := db.Exec("INSERT INTO orders (id, total) VALUES (?, 1)", id); err != nil {
			t.Fatal(err)
		}
		sh, err := f.m.Table("test", "orders").ShardOf([]byte(strconv.Itoa(id)), false)
		if err != nil {
			t.Fatal(err)
		}
		seen[sh.Group] = true
		if at := f.where(t, "orders", "id", id); len(at) != 1 || at[0] != sh.Group {
			t.Fatalf("order %d is on %v, want %s", id, at, sh.Group)
		}
	}
	if !seen["s1"] || !seen["s2"] {
		t.Fatalf("20 orders all on one shard: %v", seen)
	}
	// Global tables go to the global group.
	mustExec(t, db, "INSERT INTO settings VALUES ('a', 1)")
	if at := f.where(t, "settings", "k", "a"); len(at) != 1 || at[0] != "global" {
		t.Fatalf("setting a is on %v", at)
	}
	if err := db.QueryRow("SELECT v FROM settings WHERE k = 'a'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("global read: %d, %v", n, err)
	}
	// A transaction stays on the shard its first statement routes to.
	var other int
	for id := 2; id <= 40; id++ {
		if f.groupOf(t, "users", "1", false) != f.groupOf(t, "users", strconv.Itoa(id), false) {
			other = id
			break
		}
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE users SET name = 'tx' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(fmt.Sprintf("UPDATE users SET name = 'tx' WHERE id = %d", other))
	wantRefusal(t, err, "stays on one shard")
	if _, err := tx.Exec("UPDATE users SET name = 'tx2' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT name FROM users WHERE id = 1").Scan(&name); err != nil || name != "u1" {
		t.Fatalf("after the rollback user 1 is %q (%v)", name, err)
	}
	// A write on one shard keeps its connection for the next statement (ROW_COUNT()); a BEGIN after it still
	// starts the transaction on the shard of the statement that follows.
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{fmt.Sprintf("UPDATE users SET name = 'x' WHERE id = %d", other), "BEGIN",
		"UPDATE users SET name = 'y' WHERE id = 1", "COMMIT"} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	conn.Close()
	// A prepared statement with its key as a literal.
	lit, err := db.Prepare("SELECT name FROM users WHERE id = 1")
	if err != nil {
		t.Fatal(err)
	}
	if err := lit.QueryRow().Scan(&name); err != nil || name != "y" {
		t.Fatalf("prepared with a literal key: %q, %v", name, err)
	}
	lit.Close()
	tx, err = db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE users SET name = 'committed' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := f.direct[f.groupOf(t, "users", "1", false)].QueryRow("SELECT name FROM users WHERE id = 1").Scan(&name); err != nil || name != "committed" {
		t.Fatalf("after the commit user 1 is %q (%v)", name, err)
	}
}

func TestShardRefusals(t *testing.T) {
	f := newShardFarm(t)
	db := f.proxy
	var a, b int // two ids on different shards
	for id := 2; id <= 100; id++ {
		if f.groupOf(t, "users", "1", false) != f.groupOf(t, "users", strconv.Itoa(id), false) {
			a, b = 1, id
			break
		}
	}
	for q, want := range map[string]string{
		"SELECT * FROM users":                                                         "has no id = value in its WHERE",
		"SELECT * FROM users WHERE name = 'x'":                                        "has no id = value in its WHERE",
		"SELECT * FROM users WHERE id = 1 OR id = 2":                                  "has no id = value in its WHERE",
		fmt.Sprintf("SELECT * FROM users WHERE id IN (%d, %d)", a, b):                 "are on several shards",
		fmt.Sprintf("INSERT INTO users (id, name) VALUES (%d, 'a'), (%d, 'b')", a, b): "are on several shards",
		"INSERT INTO users (name) VALUES ('x')":                                       "must name its shard key column id",
		"INSERT INTO users (id, name) SELECT id, name FROM users":                     "INSERT … SELECT",
		"UPDATE users SET id = 5 WHERE id = 1":                                        "changes shard key",
		"SELECT * FROM users u JOIN settings s ON s.k = u.name WHERE u.id = 1":        "joins sharded table",
		"SELECT * FROM users WHERE id = (SELECT 1)":                                   "a subquery",
		"SELECT * FROM users JOIN accounts WHERE users.id = 1":                        "sharded tables",
		"ALTER TABLE users ADD COLUMN x INT; SELECT 1":                                "sharded table",
		"INSERT INTO users VALUES (3, 'x')":                                           "without a column list",
		"SELECT * FROM users WHERE id = 'abc'":                                        "",
	} {
		_, err := db.Exec(q)
		if want == "" {
			continue // an xxhash of any text routes; only checked not to break the session
		}
		wantRefusal(t, err, want)
	}
	// SHOW KEYWAY SHARDS: the map, one row per shard and the global group.
	rows, err := db.Query("SHOW KEYWAY SHARDS")
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if len(cols) < 3 || cols[0] != "Version" || n != 7 {
		t.Fatalf("SHOW KEYWAY SHARDS: columns %v, %d rows; want 6 shards and the global group", cols, n)
	}
	if _, err := db.Prepare("SELECT * FROM events WHERE what = ?"); err != nil {
		t.Fatal(err) // the prepare itself is fine (on the first shard); its executes need a key
	}
	if _, err := db.Query("SELECT * FROM events WHERE what = ?", "x"); err == nil {
		t.Fatal("a prepared scatter ran")
	} else {
		wantRefusal(t, err, "runs as a text query")
	}
	// The session goes on after each refusal.
	mustExec(t, db, "INSERT INTO users (id, name) VALUES (1, 'one')")
}

// wantRefusal checks err is the router's ER_NOT_SUPPORTED_YET containing want.
func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1235 || !strings.Contains(me.Message, want) {
		t.Fatalf("got %v, want error 1235 containing %q", err, want)
	}
}

// TestShardScatterAndDDL: a table that allows scatter answers a SELECT without its key from every shard, as one
// result set; what a concatenation cannot answer is refused; DDL runs on every shard and reports each.
func TestShardScatterAndDDL(t *testing.T) {
	f := newShardFarm(t)
	db := f.proxy
	perShard := map[string]int{}
	for id := 1; id <= 30; id++ {
		mustExec(t, db, fmt.Sprintf("INSERT INTO events (id, user_id, what) VALUES (%d, %d, 'e%d')", id, id, id))
		perShard[f.groupOf(t, "users", strconv.Itoa(id), false)]++
	}
	if perShard["s1"] == 0 || perShard["s2"] == 0 {
		t.Fatalf("events all on one shard: %v", perShard)
	}
	for _, q := range []string{"SELECT id, what FROM events", "SELECT id, what FROM events WHERE what LIKE 'e%'", "SELECT id, what FROM events WHERE user_id IN (1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30)"} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		seen := map[int]bool{}
		for rows.Next() {
			var id int
			var what string
			if err := rows.Scan(&id, &what); err != nil {
				t.Fatal(err)
			}
			if what != fmt.Sprintf("e%d", id) || seen[id] {
				t.Fatalf("%s: row %d %q (seen before: %v)", q, id, what, seen[id])
			}
			seen[id] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		rows.Close()
		if len(seen) != 30 {
			t.Fatalf("%s: %d rows, want 30 from both shards", q, len(seen))
		}
	}
	for q, want := range map[string]string{
		"SELECT COUNT(*) FROM events":           "an aggregate function",
		"SELECT * FROM events ORDER BY id":      "ORDER BY",
		"SELECT * FROM events LIMIT 3":          "LIMIT",
		"SELECT DISTINCT what FROM events":      "DISTINCT",
		"SELECT what FROM events GROUP BY what": "GROUP BY",
		"UPDATE events SET what = 'x'":          "not a plain SELECT",
	} {
		_, err := db.Exec(q)
		wantRefusal(t, err, want)
	}
	// A scatter inside a transaction is refused, even before the transaction touched a server.
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.ExecContext(context.Background(), "SELECT id FROM events")
	wantRefusal(t, err, "runs outside transactions")
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	// DDL on a sharded table runs on each shard.
	mustExec(t, db, "ALTER TABLE events ADD COLUMN note VARCHAR(10)")
	for _, g := range []string{"s1", "s2"} {
		var n int
		if err := f.direct[g].QueryRow("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = 'test' AND table_name = 'events' AND column_name = 'note'").Scan(&n); err != nil || n != 1 {
			t.Fatalf("events.note on %s: %d, %v", g, n, err)
		}
	}
	// A shard where it fails: each shard's outcome is in the error.
	mustExec(t, f.direct["s2"], "ALTER TABLE events ADD COLUMN only_s2 INT")
	_, err = db.Exec("ALTER TABLE events ADD COLUMN only_s2 INT")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || !strings.Contains(me.Message, "s1: ok") || !strings.Contains(me.Message, "s2: ") || !strings.Contains(me.Message, "Duplicate column") {
		t.Fatalf("DDL failing on one shard: %v", err)
	}
	// The session goes on, and the scatter still reads both shards' rows.
	var n int
	rows, err := db.Query("SELECT id FROM events")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		n++
	}
	rows.Close()
	if n != 30 {
		t.Fatalf("after the DDL, scatter read %d rows", n)
	}
	// DROP and CREATE of a table of the map run on every shard, and not on the global group.
	mustExec(t, db, "DROP TABLE events")
	mustExec(t, db, "CREATE TABLE events (id INT PRIMARY KEY, user_id BIGINT)")
	for _, g := range []string{"global", "s1", "s2"} {
		var cols int
		if err := f.direct[g].QueryRow("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = 'test' AND table_name = 'events'").Scan(&cols); err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{"global": 0, "s1": 2, "s2": 2}[g]; cols != want {
			t.Fatalf("after DROP and CREATE through keyway, events has %d columns on %s, want %d", cols, g, want)
		}
	}
}

// TestShardCached: point selects on a sharded table are answered from the result cache like any other, and a
// write through keyway to the row's shard invalidates them.
func TestShardCached(t *testing.T) {
	reg := validity.NewRegistry()
	cache := qcache.New(qcache.Options{Registry: reg})
	f := newShardFarm(t, func(o *Options) { o.Validity, o.Cache = reg, cache })
	db := f.proxy
	for id := 1; id <= 10; id++ {
		mustExec(t, db, fmt.Sprintf("INSERT INTO users (id, name) VALUES (%d, 'u%d')", id, id))
	}
	for id := 1; id <= 10; id++ {
		before := cache.Stats().Hits
		for range 3 {
			var name string
			if err := db.QueryRow(fmt.Sprintf("SELECT name FROM users WHERE id = %d", id)).Scan(&name); err != nil || name != fmt.Sprintf("u%d", id) {
				t.Fatalf("user %d: %q, %v", id, name, err)
			}
		}
		if hits := cache.Stats().Hits - before; hits != 2 {
			t.Fatalf("user %d: %d of 3 reads from the cache, want 2", id, hits)
		}
		mustExec(t, db, fmt.Sprintf("UPDATE users SET name = 'v%d' WHERE id = %d", id, id))
		var name string
		if err := db.QueryRow(fmt.Sprintf("SELECT name FROM users WHERE id = %d", id)).Scan(&name); err != nil || name != fmt.Sprintf("v%d", id) {
			t.Fatalf("user %d after its update: %q, %v", id, name, err)
		}
	}
}

// TestShardMapReloadUnderLoad: a writer and readers run while the map changes: the writer's ids past the first
// map's last shard are refused until the new map gives them a shard, then land there; no read misses a row written
// before it, and afterwards every row is where the new map says.
func TestShardMapReloadUnderLoad(t *testing.T) {
	f := newShardFarm(t)
	mapWith := func(shards ...shard.ShardConfig) *shard.Map {
		m, err := shard.FromConfig(shard.Config{Global: "global", Mappings: []shard.MappingConfig{
			{Name: "users", Kind: "range_int", Tables: []shard.TableConfig{{Table: "test.users", Column: "id"}}, Shards: shards}}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if _, err := f.holder.Store(mapWith(shard.ShardConfig{Name: "low", Group: "s1", To: "1000"})); err != nil {
		t.Fatal(err)
	}
	var written atomic.Int64 // ids 900 … written-1 are written
	written.Store(900)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	refused := 0
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		db := open(t, "app", "secret", f.addr, "")
		for id := 900; id < 1100; {
			_, err := db.Exec(fmt.Sprintf("INSERT INTO users (id, name) VALUES (%d, 'w')", id))
			var me *mysql.MySQLError
			switch {
			case err == nil:
				id++
				written.Store(int64(id))
			case errors.As(err, &me) && me.Number == 1235 && strings.Contains(me.Message, "no shard holds") && id >= 1000:
				refused++
				time.Sleep(time.Millisecond)
			default:
				errs <- fmt.Errorf("insert %d: %v", id, err)
				return
			}
		}
	}()
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() { // a reader: every row written before the read is found
			defer wg.Done()
			db := open(t, "app", "secret", f.addr, "")
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := written.Load()
				id := 900 + int64(i)%(n-900+1)
				if id >= n {
					continue
				}
				var name string
				if err := db.QueryRow("SELECT name FROM users WHERE id = ?", id).Scan(&name); err != nil {
					errs <- fmt.Errorf("read %d (written up to %d): %v", id, n, err)
					return
				}
			}
		}()
	}
	for written.Load() < 1000 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the writer is refused meanwhile
	if _, err := f.holder.Store(mapWith(shard.ShardConfig{Name: "low", Group: "s1", To: "1000"}, shard.ShardConfig{Name: "high", Group: "s2", From: "1000"})); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); written.Load() < 1100; {
		if time.Now().After(deadline) {
			t.Fatalf("the writer reached id %d only", written.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if refused == 0 {
		t.Fatal("the writer was never refused under the first map")
	}
	for id := 900; id < 1100; id += 7 {
		want := "s1"
		if id >= 1000 {
			want = "s2"
		}
		if at := f.where(t, "users", "id", id); len(at) != 1 || at[0] != want {
			t.Fatalf("user %d is on %v, want %s", id, at, want)
		}
	}
	var n1, n2 int
	if err := f.direct["s1"].QueryRow("SELECT COUNT(*) FROM users WHERE id >= 1000").Scan(&n1); err != nil || n1 != 0 {
		t.Fatalf("s1 holds %d rows of the new range (%v)", n1, err)
	}
	if err := f.direct["s2"].QueryRow("SELECT COUNT(*) FROM users").Scan(&n2); err != nil || n2 != 100 {
		t.Fatalf("s2 holds %d rows, want 100 (%v)", n2, err)
	}
	// A negative key of a range_int mapping, as a literal and as a parameter.
	mustExec(t, f.proxy, "INSERT INTO users (id, name) VALUES (-3, 'neg')")
	if _, err := f.proxy.Exec("INSERT INTO users (id, name) VALUES (?, 'neg')", -4); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{-3, -4} {
		if at := f.where(t, "users", "id", id); len(at) != 1 || at[0] != "s1" {
			t.Fatalf("user %d is on %v, want s1", id, at)
		}
	}
	var name string
	if err := f.proxy.QueryRow("SELECT name FROM users WHERE id = -3").Scan(&name); err != nil || name != "neg" {
		t.Fatalf("user -3 through keyway: %q, %v", name, err)
	}
}

package shard

import (
	"database/sql"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/testenv"
)

func exec(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.ExecContext(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestLoad: a map written with SQL into keyway_shards on the global server loads, routes rows to the shard servers
// it names, reloads after an edit that bumps map_version, and invalid rows are errors naming them.
func TestLoad(t *testing.T) {
	farm := testenv.NewShards(t, 3)
	ctx := t.Context()
	open := func(m *testenv.MariaDB) *sql.DB {
		db, err := sql.Open("mysql", m.AppDSN)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	global := open(farm.Global)
	groups := []string{"global", "s1", "s2", "s3"}
	servers := map[string]*sql.DB{"global": global}
	for i, m := range farm.Shards {
		servers["s"+strconv.Itoa(i+1)] = open(m)
	}

	// Before the schema exists: an error, no map.
	if _, err := Load(ctx, global, "", "global", groups); err == nil || !strings.Contains(err.Error(), "keyway_shards") {
		t.Fatalf("Load without the schema: %v", err)
	}
	exec(t, global, CreateSchemaSQL("")...)
	exec(t, global, CreateSchemaSQL("")...) // idempotent
	if _, err := Load(ctx, global, "", "global", groups); err == nil ||
		err.Error() != "shard: keyway_shards.map_version has no row: insert one with the map (INSERT INTO `keyway_shards`.map_version (id, version) VALUES (1, 1))" {
		t.Fatalf("Load without a version: %v", err)
	}
	exec(t, global,
		"START TRANSACTION",
		"INSERT INTO keyway_shards.map_version (id, version) VALUES (1, 1)",
		"INSERT INTO keyway_shards.mappings VALUES ('accounts', 'range_int'), ('users', 'hash')",
		"INSERT INTO keyway_shards.shards VALUES ('accounts', 'low', 's1', NULL, '1000'), ('accounts', 'high', 's2', '1000', NULL),"+
			" ('users', '-80', 's2', NULL, NULL), ('users', '80-c0', 's3', NULL, NULL), ('users', 'c0-', 's1', NULL, NULL)",
		"INSERT INTO keyway_shards.tables VALUES ('app', 'accounts', 'accounts', 'id', FALSE), ('', 'users', 'users', 'id', TRUE)",
		"COMMIT",
	)
	m, err := Load(ctx, global, "", "global", groups)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"accounts", "range_int", "high", "[1000, …)", "s2", "app.accounts(id)"},
		{"accounts", "range_int", "low", "[…, 1000)", "s1", "app.accounts(id)"},
		{"users", "hash", "-80", "-80", "s2", "users(id) scatter"},
		{"users", "hash", "80-c0", "80-c0", "s3", "users(id) scatter"},
		{"users", "hash", "c0-", "c0-", "s1", "users(id) scatter"},
		{"", "global", "", "", "global", "every other table"},
	}
	// Shards sort by range: low before high.
	want[0], want[1] = want[1], want[0]
	if got := m.Describe(); m.Version != 1 || !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded version %d:\n%q\nwant\n%q", m.Version, got, want)
	}
	var h Holder
	if _, err := h.Store(m); err != nil {
		t.Fatal(err)
	}

	// Route rows by the map and write each on the server of its group; then each server holds exactly its rows.
	for _, db := range servers {
		exec(t, db, "CREATE TABLE test.users (id BIGINT PRIMARY KEY)")
	}
	perGroup := make(map[string]int)
	users := h.Load().Table("test", "users")
	for id := 1; id <= 60; id++ {
		s, err := users.ShardOf([]byte(strconv.Itoa(id)), false)
		if err != nil {
			t.Fatal(err)
		}
		perGroup[s.Group]++
		exec(t, servers[s.Group], "INSERT INTO test.users VALUES ("+strconv.Itoa(id)+")")
	}
	for g, db := range servers {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM test.users").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != perGroup[g] || (g != "global" && n == 0) {
			t.Errorf("server of %s holds %d rows, want %d (and every shard some)", g, n, perGroup[g])
		}
	}

	// An edit without a version bump loads, but the Holder refuses it; with the bump it is swapped in.
	exec(t, global, "UPDATE keyway_shards.shards SET range_to = '2000' WHERE name = 'low'",
		"UPDATE keyway_shards.shards SET range_from = '2000' WHERE name = 'high'")
	m2, err := Load(ctx, global, "", "global", groups)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Store(m2); ok || err == nil {
		t.Fatalf("a changed map with version 1 stored: %v %v", ok, err)
	}
	exec(t, global, "UPDATE keyway_shards.map_version SET version = version + 1")
	m3, err := Load(ctx, global, "", "global", groups)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := h.Store(m3); !ok || err != nil || h.Load().Version != 2 {
		t.Fatalf("version 2: %v %v", ok, err)
	}
	if s, err := h.Load().Table("app", "accounts").ShardOf([]byte("1500"), false); err != nil || s.Name != "low" {
		t.Fatalf("1500 after the reload: %v %v, want low", s, err)
	}

	// Invalid rows: every problem named, and no map.
	exec(t, global,
		"INSERT INTO keyway_shards.mappings VALUES ('bad', 'range')",
		"INSERT INTO keyway_shards.shards VALUES ('users', 'c0-ff', 's9', NULL, NULL), ('accounts', 'mid', 's3', '500', '1500')",
		"INSERT INTO keyway_shards.tables VALUES ('app', 'users', 'bad', 'id', FALSE)",
	)
	_, err = Load(ctx, global, "", "global", groups)
	wantErr := "shard: the map in keyway_shards: " + strings.Join([]string{
		`mapping accounts, shards low and mid overlap`,
		`mapping bad: unknown kind "range": want hash, xxhash, range_int or range_string`,
		`mapping users, shard c0-ff: group "s9" is not a configured group (global, s1, s2, s3)`,
		`mapping users, shards c0- and c0-ff overlap`,
	}, "\n")
	if err == nil || err.Error() != wantErr {
		t.Fatalf("Load of invalid rows:\n%v\nwant\n%s", err, wantErr)
	}
	exec(t, global, "DELETE FROM keyway_shards.tables WHERE mapping = 'bad'", "DELETE FROM keyway_shards.mappings WHERE name = 'bad'",
		"UPDATE keyway_shards.shards SET range_from = 'x' WHERE name = 'mid'", "DELETE FROM keyway_shards.shards WHERE name = 'c0-ff'")
	_, err = Load(ctx, global, "", "global", groups)
	if want := `shard: the map in keyway_shards: mapping accounts, shard mid: from = "x": want an integer (a 64-bit signed integer), or none for an open end`; err == nil || err.Error() != want {
		t.Fatalf("Load of a bad bound:\n%v\nwant\n%s", err, want)
	}
	exec(t, global, "DELETE FROM keyway_shards.shards WHERE name = 'mid'", "UPDATE keyway_shards.shards SET range_from = '00' WHERE name = 'c0-'")
	_, err = Load(ctx, global, "", "global", groups)
	if want := "shard: keyway_shards.shards row (users, c0-): a hash shard's range is its name: set range_from and range_to to NULL"; err == nil || err.Error() != want {
		t.Fatalf("Load of a hash shard with a bound:\n%v\nwant\n%s", err, want)
	}
}

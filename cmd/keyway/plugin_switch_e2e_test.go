package main

import (
	"database/sql"
	"strings"
	"testing"
	"time"
)

// TestPluginContainerSwitch follows the InnoDB memcached plugin's setup walk-through with two containers, "default"
// and "aaa", each on a demo_test table as the walk-through creates it: keys without "@@" go to "default"; "get @@aaa"
// answers with aaa's table ("schema/table", as the plugin answers) and switches the connection, so its keys without
// "@@" then go to aaa, on that connection only, until "get @@default" switches it back.
func TestPluginContainerSwitch(t *testing.T) {
	demo := func(table string) string {
		return `CREATE TABLE test.` + table + ` (c1 VARCHAR(32), c2 VARCHAR(1024), c3 INT, c4 BIGINT UNSIGNED, c5 INT, primary key(c1)) ENGINE=INNODB`
	}
	m, db := mariaDBWith(t, append(innodbMemcacheSchema(),
		demo("demo_test"),
		demo("demo_test2"),
		`INSERT INTO innodb_memcache.containers VALUES ('default', 'test', 'demo_test', 'c1', 'c2', 'c3', 'c4', 'c5', 'PRIMARY')`,
		`INSERT INTO innodb_memcache.containers VALUES ('aaa', 'test', 'demo_test2', 'c1', 'c2', 'c3', 'c4', 'c5', 'PRIMARY')`,
		`INSERT INTO test.demo_test VALUES ('AA', 'HELLO, HELLO', 8, 0, 0)`,
	)...)
	kw := startMigrated(t, m)
	row := func(table, key string) string {
		var v string
		if err := db.QueryRow(`SELECT c2 FROM test.`+table+` WHERE c1 = ?`, key).Scan(&v); err == sql.ErrNoRows {
			return "<no row>"
		} else if err != nil {
			t.Fatal(err)
		}
		return v
	}

	a, b := dialText(t, kw.Addr), dialText(t, kw.Addr)
	a.expect(t, "get AA", "VALUE AA 8 12\r\nHELLO, HELLO\r\nEND\r\n")
	a.expect(t, "set BB 0 0 5\r\nWORLD", "STORED\r\n")
	if got := row("demo_test", "BB"); got != "WORLD" {
		t.Fatalf("set BB before the switch: demo_test row BB = %q, want WORLD", got)
	}
	// The switch, answered with the table as the plugin answers it.
	a.expect(t, "get @@aaa", "VALUE @@aaa 0 15\r\ntest/demo_test2\r\nEND\r\n")
	a.expect(t, "set CC 0 0 5\r\nOTHER", "STORED\r\n")
	if got, other := row("demo_test2", "CC"), row("demo_test", "CC"); got != "OTHER" || other != "<no row>" {
		t.Fatalf("set CC after get @@aaa: demo_test2 row = %q, demo_test row = %q; want OTHER in demo_test2 only\nkeyway:\n%s", got, other, kw.Output())
	}
	a.expect(t, "get CC AA", "VALUE CC 0 5\r\nOTHER\r\nEND\r\n")
	a.expect(t, "get @@default.AA", "VALUE @@default.AA 8 12\r\nHELLO, HELLO\r\nEND\r\n") // "@@name.key" still names its container
	a.expect(t, "delete CC", "DELETED\r\n")
	if got := row("demo_test2", "CC"); got != "<no row>" {
		t.Fatalf("delete CC after the switch: demo_test2 row CC = %q", got)
	}
	// The switch is the connection's own.
	b.expect(t, "get AA CC", "VALUE AA 8 12\r\nHELLO, HELLO\r\nEND\r\n")
	// A switch inside a multi-key get applies to the keys after it; "get @@default" switches back.
	a.expect(t, "set DD 0 0 1\r\nx", "STORED\r\n")
	a.expect(t, "get DD @@default AA DD", "VALUE DD 0 1\r\nx\r\nVALUE @@default 0 14\r\ntest/demo_test\r\nVALUE AA 8 12\r\nHELLO, HELLO\r\nEND\r\n")
	a.expect(t, "get BB", "VALUE BB 0 5\r\nWORLD\r\nEND\r\n")
}

// expect sends req (lines joined by CRLF) and reads a reply of want's length, which must be want.
func (tc *textConn) expect(t *testing.T, req, want string) {
	t.Helper()
	tc.nc.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := tc.nc.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 0, len(want))
	for len(got) < len(want) {
		line, err := tc.r.ReadString('\n')
		got = append(got, line...)
		if err != nil || strings.HasSuffix(string(got), "END\r\n") || !strings.HasPrefix(want, string(got)) {
			break
		}
	}
	if string(got) != want {
		t.Fatalf("%q: got %q, want %q", req, got, want)
	}
}

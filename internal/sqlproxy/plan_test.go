package sqlproxy

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestPlanClassAndTables(t *testing.T) {
	type want struct {
		class   Class
		tables  []string
		in, end bool
		perr    bool
		sess    bool // SessionChange; implied by class session
	}
	cases := []struct {
		sql string
		want
	}{
		// reads
		{"SELECT * FROM t WHERE id = 1", want{class: ClassRead, tables: []string{"t"}}},
		{"select a from Shop.Items i join shop.prices p on i.id=p.id", want{class: ClassRead, tables: []string{"shop.items", "shop.prices"}}},
		{"SELECT * FROM t WHERE id IN (SELECT id FROM u WHERE x IN (SELECT x FROM db.v))", want{class: ClassRead, tables: []string{"t", "u", "db.v"}}},
		{"SELECT * FROM t WHERE id = 1 FOR UPDATE", want{class: ClassRead, tables: []string{"t"}}},
		{"SELECT * FROM t WHERE id = 1 LOCK IN SHARE MODE", want{class: ClassRead, tables: []string{"t"}}},
		{"SELECT a FROM t UNION ALL SELECT a FROM u", want{class: ClassRead, tables: []string{"t", "u"}}},
		{"WITH c AS (SELECT id FROM t) SELECT * FROM c JOIN u ON c.id = u.id", want{class: ClassRead, tables: []string{"t", "u"}}},
		{"SHOW TABLES", want{class: ClassRead}},
		{"SHOW COLUMNS FROM t", want{class: ClassRead, tables: []string{"t"}}},
		{"DESCRIBE t", want{class: ClassRead, tables: []string{"t"}}},
		{"EXPLAIN SELECT * FROM t", want{class: ClassRead, tables: []string{"t"}}},
		{"SELECT 1", want{class: ClassRead}},
		{"SELECT @@version", want{class: ClassRead}},
		// writes
		{"INSERT INTO t (a, b) VALUES (1, 'x')", want{class: ClassWrite, tables: []string{"t"}}},
		{"INSERT INTO t SELECT * FROM db.u WHERE a > 3", want{class: ClassWrite, tables: []string{"t", "db.u"}}},
		{"REPLACE INTO t VALUES (1)", want{class: ClassWrite, tables: []string{"t"}}},
		{"UPDATE t SET a = a + 1 WHERE id = 7", want{class: ClassWrite, tables: []string{"t"}}},
		{"UPDATE t JOIN u ON t.id = u.id SET t.a = u.a", want{class: ClassWrite, tables: []string{"t", "u"}}},
		{"DELETE FROM t WHERE id = 1", want{class: ClassWrite, tables: []string{"t"}}},
		{"DELETE a FROM t AS a JOIN u AS b ON a.id = b.id", want{class: ClassWrite, tables: []string{"t", "u"}}},
		{"DELETE t, u FROM t JOIN u ON t.id = u.id", want{class: ClassWrite, tables: []string{"t", "u"}}},
		{"DELETE FROM t WHERE id IN (SELECT id FROM s.gone)", want{class: ClassWrite, tables: []string{"t", "s.gone"}}},
		{"LOAD DATA INFILE '/tmp/x' INTO TABLE t", want{class: ClassWrite, tables: []string{"t"}}},
		{"SELECT * FROM t INTO OUTFILE '/tmp/x'", want{class: ClassWrite, tables: []string{"t"}}},
		{"CALL p(1)", want{class: ClassWrite}},
		// DDL
		{"CREATE TABLE t (id INT PRIMARY KEY)", want{class: ClassDDL, tables: []string{"t"}}},
		{"ALTER TABLE db.t ADD COLUMN c INT", want{class: ClassDDL, tables: []string{"db.t"}}},
		{"DROP TABLE t, u", want{class: ClassDDL, tables: []string{"t", "u"}}},
		{"TRUNCATE TABLE t", want{class: ClassDDL, tables: []string{"t"}}},
		{"RENAME TABLE a TO b", want{class: ClassDDL, tables: []string{"a", "b"}}},
		{"CREATE INDEX i ON t (a)", want{class: ClassDDL, tables: []string{"t"}}},
		{"CREATE DATABASE d", want{class: ClassDDL}},
		{"CREATE VIEW v AS SELECT * FROM t", want{class: ClassDDL, tables: []string{"v", "t"}}},
		{"GRANT SELECT ON d.* TO 'u'@'%'", want{class: ClassDDL}},
		// transactions
		{"BEGIN", want{class: ClassTransaction, in: true}},
		{"START TRANSACTION", want{class: ClassTransaction, in: true}},
		{"START TRANSACTION READ ONLY", want{class: ClassTransaction, in: true}},
		{"COMMIT", want{class: ClassTransaction, end: true}},
		{"ROLLBACK", want{class: ClassTransaction, end: true}},
		{"ROLLBACK TO SAVEPOINT s1", want{class: ClassTransaction}},
		{"COMMIT AND CHAIN", want{class: ClassTransaction, in: true}},
		{"SAVEPOINT s1", want{class: ClassTransaction}},
		{"RELEASE SAVEPOINT s1", want{class: ClassTransaction}},
		{"XA START 'x'", want{class: ClassTransaction, in: true, perr: true}},
		{"XA COMMIT 'x'", want{class: ClassTransaction, end: true, perr: true}},
		// session
		{"SET NAMES utf8mb4", want{class: ClassSession}},
		{"SET @a = 1", want{class: ClassSession}},
		{"SET SESSION sql_mode = 'ANSI'", want{class: ClassSession}},
		{"SET autocommit = 0", want{class: ClassSession, in: true}},
		{"SET autocommit = 1", want{class: ClassSession, end: true}},
		{"SET @@session.autocommit = OFF", want{class: ClassSession, in: true}},
		{"SET autocommit = ON", want{class: ClassSession, end: true}},
		{"SET GLOBAL autocommit = 0", want{class: ClassSession}},
		{"USE shop", want{class: ClassSession}},
		{"LOCK TABLES t READ, db.u WRITE", want{class: ClassSession, tables: []string{"t", "db.u"}}},
		{"UNLOCK TABLES", want{class: ClassSession}},
		{"PREPARE s FROM 'SELECT 1'", want{class: ClassSession}},
		{"EXECUTE s USING @a", want{class: ClassSession}},
		{"DEALLOCATE PREPARE s", want{class: ClassSession}},
		{"SELECT @n := COUNT(*) FROM t", want{class: ClassSession, tables: []string{"t"}}},
		{"CREATE TEMPORARY TABLE tmp (id INT)", want{class: ClassSession, tables: []string{"tmp"}}},
		{"DROP TEMPORARY TABLE tmp", want{class: ClassSession, tables: []string{"tmp"}}},
		// other
		{"KILL 12", want{class: ClassOther}},
		// multi-statements: strongest class; flags describe the final state
		{"SELECT 1; UPDATE t SET a = 1", want{class: ClassWrite, tables: []string{"t"}}},
		{"BEGIN; INSERT INTO t VALUES (1); COMMIT", want{class: ClassWrite, tables: []string{"t"}, end: true}},
		{"SET @x = 1; SELECT @x", want{class: ClassSession}},
		{"CREATE TABLE n (id INT); BEGIN", want{class: ClassDDL, tables: []string{"n"}, in: true}},
		{"USE other; INSERT INTO t VALUES (1)", want{class: ClassWrite, tables: []string{"t"}, sess: true}},
		// the parser cannot parse these (MariaDB syntax or garbage): first-keyword guess, a parse error, a digest
		{"INSERT INTO t VALUES (1) RETURNING id", want{class: ClassWrite, perr: true}},
		{"DELETE FROM t WHERE id = 1 RETURNING id", want{class: ClassWrite, perr: true}},
		{"SELECT * FROM t WHERE id = 1 INTO @v", want{class: ClassSession, perr: true}}, // pins: user variable
		{"frobnicate the database", want{class: ClassOther, perr: true}},
		{"INSERT INTO t VALUES (1) RETURNING id; USE x; BEGIN", want{class: ClassWrite, perr: true, sess: true, in: true}},
		{"SELECT 1; XA ROLLBACK 'x'", want{class: ClassTransaction, perr: true, end: true}},
		{"", want{class: ClassOther, perr: true}},
	}
	pc := NewPlanCache(1000)
	for _, c := range cases {
		t.Run(c.sql, func(t *testing.T) {
			p := pc.Plan(c.sql)
			if p == nil {
				t.Fatal("nil plan")
			}
			if p.Class != c.class {
				t.Errorf("class = %v, want %v (parse error %q)", p.Class, c.class, p.ParseError)
			}
			if (p.ParseError != "") != c.perr {
				t.Errorf("parse error = %q, want error: %v", p.ParseError, c.perr)
			}
			if !c.perr && !reflect.DeepEqual(p.Tables, c.tables) {
				t.Errorf("tables = %q, want %q", p.Tables, c.tables)
			}
			if p.InTransaction != c.in || p.EndsTransaction != c.end {
				t.Errorf("in/ends = %v/%v, want %v/%v", p.InTransaction, p.EndsTransaction, c.in, c.end)
			}
			if p.SessionChange != (c.sess || c.class == ClassSession) {
				t.Errorf("SessionChange = %v", p.SessionChange)
			}
			if len(p.Digest) != 64 {
				t.Errorf("digest %q is not 64 hex digits", p.Digest)
			}
		})
	}
}

func TestPlanNormalization(t *testing.T) {
	pc := NewPlanCache(100)
	a := pc.Plan("select * from t where id=1")
	b := pc.Plan("SELECT *   FROM t WHERE id = 2")
	c := pc.Plan("select * from t where id=1 /* a comment */")
	if a.Digest != b.Digest || a.Digest != c.Digest {
		t.Fatalf("digests differ: %s %s %s", a.Digest, b.Digest, c.Digest)
	}
	if a != b {
		t.Error("same digest gave two plans")
	}
	if want := "select * from `t` where `id` = ?"; a.Normalized != want {
		t.Errorf("normalized = %q, want %q", a.Normalized, want)
	}
	if d := pc.Plan("select * from t where name=1"); d.Digest == a.Digest {
		t.Error("different column, same digest")
	}
	if pc.Len() != 2 {
		t.Errorf("Len = %d, want 2", pc.Len())
	}
}

func TestPlanParsedOncePerDigest(t *testing.T) {
	pc := NewPlanCache(100)
	for i := 0; i < 50; i++ {
		pc.Plan(fmt.Sprintf("SELECT v FROM kv WHERE k = %d", i))
		pc.Plan(fmt.Sprintf("UPDATE kv SET v = 'x%d' WHERE k = %d", i, i))
	}
	if n := pc.parses.Load(); n != 2 {
		t.Fatalf("parses = %d, want 2", n)
	}
	// Literal-dependent statements are the documented exception: each is re-parsed.
	pc.Plan("SET autocommit=0")
	pc.Plan("SET autocommit=1")
	if n := pc.parses.Load(); n != 4 {
		t.Fatalf("parses = %d, want 4", n)
	}
}

func TestPlanEviction(t *testing.T) {
	pc := NewPlanCache(32)
	for i := 0; i < 1000; i++ {
		p := pc.Plan(fmt.Sprintf("SELECT c%d FROM t", i))
		if p.Class != ClassRead {
			t.Fatalf("class %v", p.Class)
		}
	}
	if n := pc.Len(); n > 32 || n == 0 {
		t.Fatalf("Len = %d, want 1..32", n)
	}
	// A tiny capacity still works (one entry per shard).
	small := NewPlanCache(0)
	for i := 0; i < 100; i++ {
		small.Plan(fmt.Sprintf("SELECT c%d FROM t", i))
	}
	if n := small.Len(); n > planShards {
		t.Fatalf("Len = %d, want <= %d", n, planShards)
	}
}

func TestPlanConcurrent(t *testing.T) {
	pc := NewPlanCache(64)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				var sql string
				want := ClassRead
				switch i % 4 {
				case 0:
					sql = fmt.Sprintf("SELECT * FROM t WHERE id = %d", i)
				case 1:
					sql, want = fmt.Sprintf("UPDATE t SET a = %d WHERE id = %d", g, i), ClassWrite
				case 2:
					sql = fmt.Sprintf("SELECT c%d FROM t%d", i%200, i%7) // many digests: eviction under load
				case 3:
					sql, want = fmt.Sprintf("SET autocommit = %d", i%2), ClassSession
				}
				p := pc.Plan(sql)
				if p.Class != want {
					t.Errorf("%s: class %v, want %v", sql, p.Class, want)
					return
				}
				if i%4 == 3 && p.InTransaction != (i%2 == 0) {
					t.Errorf("%s: InTransaction %v", sql, p.InTransaction)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestClassString(t *testing.T) {
	want := []string{"other", "read", "write", "ddl", "transaction", "session"}
	for i, w := range want {
		if got := Class(i).String(); got != w {
			t.Errorf("Class(%d) = %q, want %q", i, got, w)
		}
	}
	if Class(200).String() != "other" {
		t.Error("unknown class should print as other")
	}
}

// BenchmarkPlanHit measures the per-query cost once the digest is cached: a lexer pass plus a map lookup.
func BenchmarkPlanHit(b *testing.B) {
	pc := NewPlanCache(1000)
	const sql = "SELECT c FROM sbtest1 WHERE id = 4711"
	pc.Plan(sql)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if pc.Plan(sql).Class != ClassRead {
				b.Fatal("wrong class")
			}
		}
	})
}

// BenchmarkPlanMiss is the first-sight cost (lexer pass + parse + classification), for comparison.
func BenchmarkPlanMiss(b *testing.B) {
	pc := NewPlanCache(1 << 20)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		pc.Plan(fmt.Sprintf("SELECT c%d FROM sbtest1 WHERE id = 1", i))
	}
}

func TestPlanParseErrorBounded(t *testing.T) {
	pc := NewPlanCache(10)
	long := "INSERT INTO t VALUES (1) RETURNING " + strings.Repeat("a, ", 10000) + "id"
	p := pc.Plan(long)
	if p.ParseError == "" || len(p.ParseError) > maxParseError+len("…") {
		t.Fatalf("parse error of %d bytes: %.80q", len(p.ParseError), p.ParseError)
	}
	if p.Class != ClassWrite {
		t.Errorf("class %v", p.Class)
	}
}

// FuzzPlan checks that any input yields a plan with a digest and without a panic.
func FuzzPlan(f *testing.F) {
	for _, s := range []string{"SELECT 1", "INSERT INTO t VALUES (1) RETURNING id", "BEGIN; COMMIT", "SET autocommit=0",
		"WITH c AS (SELECT 1) SELECT * FROM c", "DELETE a FROM t a JOIN u b", "/*+ x */ select", "'", "`", "\x00"} {
		f.Add(s)
	}
	pc := NewPlanCache(100)
	f.Fuzz(func(t *testing.T, sql string) {
		p := pc.Plan(sql)
		if p == nil || len(p.Digest) != 64 {
			t.Fatalf("plan %+v", p)
		}
		if p.InTransaction && p.EndsTransaction {
			t.Fatalf("both transaction flags set: %+v", p)
		}
	})
}

// TestPlanKill: KILL statements are recognised once per digest; the id comes from each statement's own text; forms
// keyway cannot map to one of its sessions are marked refused.
func TestPlanKill(t *testing.T) {
	pc := NewPlanCache(100)
	cases := []struct {
		sql  string
		kind KillKind
		id   uint64
	}{
		{"KILL QUERY 7", KillQuery, 7},
		{"kill query 8", KillQuery, 8},
		{"/* c */ KILL /* 99 */ QUERY 9 -- 5", KillQuery, 9},
		{"KILL 10", KillConnection, 10},
		{"KILL CONNECTION 4294967296", KillConnection, 1 << 32},
		{"KILL USER app", KillRefused, 0},
		{"KILL HARD QUERY 5", KillRefused, 0},
		{"KILL QUERY ID 5", KillRefused, 0},
		{"KILL CONNECTION_ID()", KillRefused, 0},
		{"KILL TIDB 5", KillRefused, 0},
		{"SELECT 1; KILL 5", KillRefused, 0},
		{"SELECT 'KILL 5'", KillNone, 0},
	}
	for _, c := range cases {
		p := pc.Plan(c.sql)
		if p.Kill != c.kind {
			t.Errorf("%q: Kill %d, want %d", c.sql, p.Kill, c.kind)
			continue
		}
		if c.kind == KillQuery || c.kind == KillConnection {
			if id, ok := pc.KillID(c.sql); !ok || id != c.id {
				t.Errorf("%q: KillID %d %v, want %d", c.sql, id, ok, c.id)
			}
		}
	}
	before := pc.parses.Load()
	if p := pc.Plan("KILL QUERY 12345"); p.Kill != KillQuery || pc.parses.Load() != before {
		t.Fatalf("a known KILL digest was classified again (kind %d)", p.Kill)
	}
}

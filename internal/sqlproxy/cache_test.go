package sqlproxy

import (
	"context"
	"encoding/binary"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/validity"
)

// executeInt builds a COM_STMT_EXECUTE of statement id with one INT parameter v; typed sets
// new-params-bound and sends the type, as a client does on the first execute only.
func executeInt(id uint32, v int32, typed bool) []byte {
	b := binary.LittleEndian.AppendUint32(nil, id)
	b = append(b, 0)                           // no cursor
	b = binary.LittleEndian.AppendUint32(b, 1) // iterations
	b = append(b, 0)                           // null bitmap
	if typed {
		b = append(b, 1, 0x03, 0x00) // bound; MYSQL_TYPE_LONG, signed
	} else {
		b = append(b, 0)
	}
	return binary.LittleEndian.AppendUint32(b, uint32(v))
}

func (rc *rawClient) prepareStmt(q string) uint32 {
	rc.t.Helper()
	if err := rc.c.WriteCommand(0x16, []byte(q)); err != nil {
		rc.t.Fatal(err)
	}
	p, err := rc.c.ReadPacket()
	if err != nil || p[0] != 0 {
		rc.t.Fatalf("prepare: %x %v", p, err)
	}
	id := binary.LittleEndian.Uint32(p[1:])
	n := 0
	for _, k := range []int{int(binary.LittleEndian.Uint16(p[5:])), int(binary.LittleEndian.Uint16(p[7:]))} {
		if k > 0 {
			n += k + eofCount(rc.c.Capabilities) // definitions, then an EOF unless deprecated
		}
	}
	for range n {
		if _, err := rc.c.ReadPacket(); err != nil {
			rc.t.Fatal(err)
		}
	}
	return id
}

func (rc *rawClient) executeOne(payload []byte) string {
	rc.t.Helper()
	if err := rc.c.WriteCommand(0x17, payload); err != nil {
		rc.t.Fatal(err)
	}
	rows, err := rc.readResult(true)
	if err != nil {
		rc.t.Fatalf("execute: %v", err)
	}
	return strings.Join(rows, "|")
}

// TestCachedExecuteThenUntypedExecute: a client binds parameter types on its first execute only. When that
// execute is answered from the cache the backend never sees the types, so the next execute keyway sends must
// carry them (sysbench failed with 1210 "Incorrect arguments to mysqld_stmt_execute" before).
func TestCachedExecuteThenUntypedExecute(t *testing.T) {
	m := mariadb(t)
	db := open(t, "app", "secret", m.Addr, "")
	mustExec(t, db, "DROP TABLE IF EXISTS qc_types")
	mustExec(t, db, "CREATE TABLE qc_types (id INT PRIMARY KEY, c VARCHAR(10))")
	mustExec(t, db, "INSERT INTO qc_types VALUES (1, 'first'), (2, 'second')")
	reg := validity.NewRegistry()
	cache := qcache.New(qcache.Options{Registry: reg})
	_, addr := startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) { o.Validity, o.Cache = reg, cache }))
	const q = "SELECT c FROM qc_types WHERE id = ?"

	a := newRawClient(t, addr, "app", "secret", 0)
	if got := a.executeOne(executeInt(a.prepareStmt(q), 1, true)); !strings.Contains(got, "first") {
		t.Fatalf("fill: %q", got)
	}
	b := newRawClient(t, addr, "app", "secret", 0)
	id := b.prepareStmt(q)
	hits := cache.Stats().Hits
	if got := b.executeOne(executeInt(id, 1, true)); !strings.Contains(got, "first") || cache.Stats().Hits != hits+1 {
		t.Fatalf("hit: %q, hits %d → %d", got, hits, cache.Stats().Hits)
	}
	if got := b.executeOne(executeInt(id, 2, false)); !strings.Contains(got, "second") {
		t.Fatalf("untyped execute after a cached typed one: %q", got)
	}
	if got := b.executeOne(executeInt(id, 2, false)); !strings.Contains(got, "second") {
		t.Fatalf("the same again (now a hit): %q", got)
	}
}

// TestConcurrentMissesMakeOneQuery: sessions that miss the same entry while its fill runs wait for it and are
// answered from it. The table is write-locked directly so the first fill blocks until every session has missed.
func TestConcurrentMissesMakeOneQuery(t *testing.T) {
	m := mariadb(t)
	db := open(t, "app", "secret", m.Addr, "")
	mustExec(t, db, "DROP TABLE IF EXISTS qc_flight")
	mustExec(t, db, "CREATE TABLE qc_flight (id INT PRIMARY KEY, c VARCHAR(10))")
	mustExec(t, db, "INSERT INTO qc_flight VALUES (1, 'one')")
	reg := validity.NewRegistry()
	cache := qcache.New(qcache.Options{Registry: reg})
	_, addr := startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) { o.Validity, o.Cache = reg, cache }))
	through := open(t, "app", "secret", addr, "")
	through.SetMaxOpenConns(8)

	lock, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(context.Background(), "LOCK TABLES qc_flight WRITE"); err != nil {
		t.Fatal(err)
	}
	const sessions = 6
	results := make(chan string, sessions)
	for range sessions {
		go func() {
			var c string
			if err := through.QueryRow("SELECT c FROM qc_flight WHERE id = 1").Scan(&c); err != nil {
				c = err.Error()
			}
			results <- c
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for cache.Stats().Joined < sessions-1 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d sessions joined the fill in flight", cache.Stats().Joined, sessions-1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := lock.ExecContext(context.Background(), "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	for range sessions {
		if c := <-results; c != "one" {
			t.Fatalf("a session got %q", c)
		}
	}
	if st := cache.Stats(); st.Stores != 1 || st.Hits < sessions-1 {
		t.Fatalf("stats %+v: want one fill answering every session", st)
	}
}

// TestCacheHints: /*+ keyway nocache */ keeps a point select out of the cache, /*+ keyway cache */ puts in a read
// that is not a point select, and ttl=N bounds its life.
func TestCacheHints(t *testing.T) {
	m := mariadb(t)
	db := open(t, "app", "secret", m.Addr, "")
	mustExec(t, db, "DROP TABLE IF EXISTS qc_hints")
	mustExec(t, db, "CREATE TABLE qc_hints (id INT PRIMARY KEY, c VARCHAR(10))")
	mustExec(t, db, "INSERT INTO qc_hints VALUES (1, 'one'), (2, 'two')")
	reg := validity.NewRegistry()
	cache := qcache.New(qcache.Options{Registry: reg})
	_, addr := startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) { o.Validity, o.Cache = reg, cache }))
	through := open(t, "app", "secret", addr, "")
	hits := func(q string) int64 {
		t.Helper()
		before := cache.Stats().Hits
		for range 3 {
			rows, err := through.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			rows.Close()
		}
		return cache.Stats().Hits - before
	}
	if n := hits("SELECT /*+ keyway nocache */ c FROM qc_hints WHERE id = 1"); n != 0 {
		t.Errorf("nocache: %d hits", n)
	}
	if n := hits("SELECT c FROM qc_hints WHERE id > 0"); n != 0 {
		t.Errorf("a range read without a hint: %d hits", n)
	}
	if n := hits("SELECT /*+ keyway cache */ c FROM qc_hints WHERE id > 0"); n != 2 {
		t.Errorf("a range read with the cache hint: %d hits, want 2", n)
	}
	q := "SELECT /*+ keyway cache ttl=1 */ c FROM qc_hints WHERE id < 9"
	hits(q)
	time.Sleep(1100 * time.Millisecond)
	before := cache.Stats().Hits
	rows, err := through.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if cache.Stats().Hits != before {
		t.Error("an entry was served past its ttl")
	}
}

// TestCacheRules: [[cache.rules]] cache reads that are not point selects, by table or by regex; a hint still
// wins.
func TestCacheRules(t *testing.T) {
	m := mariadb(t)
	db := open(t, "app", "secret", m.Addr, "")
	mustExec(t, db, "DROP TABLE IF EXISTS qc_rules")
	mustExec(t, db, "CREATE TABLE qc_rules (id INT PRIMARY KEY, c VARCHAR(10))")
	mustExec(t, db, "INSERT INTO qc_rules VALUES (1, 'one'), (2, 'two')")
	reg := validity.NewRegistry()
	cache := qcache.New(qcache.Options{Registry: reg})
	rules := []CacheRule{
		{Table: validity.TableID{Name: "qc_rules"}},
		{Regex: regexp.MustCompile(`seq_1_to_10`)},
	}
	_, addr := startProxyOpts(t, testConfig(m.Addr).with(t, func(o *Options) { o.Validity, o.Cache, o.CacheRules = reg, cache, rules }))
	through := open(t, "app", "secret", addr, "")
	hits := func(q string) int64 {
		t.Helper()
		before := cache.Stats().Hits
		for range 3 {
			rows, err := through.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			rows.Close()
		}
		return cache.Stats().Hits - before
	}
	if n := hits("SELECT c FROM qc_rules WHERE id > 0"); n != 2 {
		t.Errorf("table rule: %d hits, want 2", n)
	}
	if n := hits("SELECT /*+ keyway nocache */ c FROM qc_rules WHERE id > 0"); n != 0 {
		t.Errorf("a nocache hint under a table rule: %d hits", n)
	}
	if n := hits("SELECT count(*) FROM seq_1_to_10 WHERE seq > 3"); n != 2 {
		t.Errorf("regex rule: %d hits, want 2", n)
	}
	mustExec(t, through, "UPDATE qc_rules SET c = 'uno' WHERE id = 1")
	var c string
	if err := through.QueryRow("SELECT c FROM qc_rules WHERE id > 0 ORDER BY id LIMIT 1").Scan(&c); err != nil || c != "uno" {
		t.Fatalf("after a write through keyway: %q %v", c, err)
	}
}

package sqlproxy

import (
	"context"
	"database/sql"
	"encoding/binary"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
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
	r := newCacheRig(t, "qc_types", "(1, 'first'), (2, 'second')")
	addr := r.start(t, nil)
	const q = "SELECT c FROM qc_types WHERE id = ?"

	a := newRawClient(t, addr, "app", "secret", 0)
	if got := a.executeOne(executeInt(a.prepareStmt(q), 1, true)); !strings.Contains(got, "first") {
		t.Fatalf("fill: %q", got)
	}
	b := newRawClient(t, addr, "app", "secret", 0)
	id := b.prepareStmt(q)
	hits := r.cache.Stats().Hits
	if got := b.executeOne(executeInt(id, 1, true)); !strings.Contains(got, "first") || r.cache.Stats().Hits != hits+1 {
		t.Fatalf("hit: %q, hits %d → %d", got, hits, r.cache.Stats().Hits)
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
	r := newCacheRig(t, "qc_flight", "(1, 'one')")
	addr := r.start(t, nil)
	through := open(t, "app", "secret", addr, "")
	through.SetMaxOpenConns(8)

	lock, err := r.db.Conn(context.Background())
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
	for r.cache.Stats().Joined < sessions-1 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d sessions joined the fill in flight", r.cache.Stats().Joined, sessions-1)
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
	if st := r.cache.Stats(); st.Stores != 1 || st.Hits < sessions-1 {
		t.Fatalf("stats %+v: want one fill answering every session", st)
	}
}

// TestCacheHints: /*+ keyway nocache */ keeps a point select out of the cache, /*+ keyway cache */ puts in a read
// that is not a point select, and ttl=N bounds its life.
func TestCacheHints(t *testing.T) {
	r := newCacheRig(t, "qc_hints", "(1, 'one'), (2, 'two')")
	addr := r.start(t, nil)
	through := open(t, "app", "secret", addr, "")
	hits := func(q string) int64 { t.Helper(); return r.hits(t, through, q) }
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
	before := r.cache.Stats().Hits
	rows, err := through.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if r.cache.Stats().Hits != before {
		t.Error("an entry was served past its ttl")
	}
}

// TestCacheRules: [[cache.rules]] cache reads that are not point selects, by table or by regex; a hint still
// wins.
func TestCacheRules(t *testing.T) {
	r := newCacheRig(t, "qc_rules", "(1, 'one'), (2, 'two')")
	rules := []CacheRule{
		{Table: validity.TableID{Name: "qc_rules"}},
		{Regex: regexp.MustCompile(`seq_1_to_10`)},
	}
	addr := r.start(t, rules)
	through := open(t, "app", "secret", addr, "")
	hits := func(q string) int64 { t.Helper(); return r.hits(t, through, q) }
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

// TestSetCacheRules: rules replaced while serving (a SIGHUP reload) take effect for the next statements, and a
// regex verdict of a replaced rule is not reused for its successor.
func TestSetCacheRules(t *testing.T) {
	r := newCacheRig(t, "qc_reload", "(1, 'one'), (2, 'two')")
	s, addr := startProxyOpts(t, testConfig(r.addr).with(t, func(o *Options) { o.Validity, o.Cache = r.reg, r.cache }))
	through := open(t, "app", "secret", addr, "")
	const q = "SELECT c FROM qc_reload WHERE id > 0"
	if n := r.hits(t, through, q); n != 0 {
		t.Fatalf("no rules: %d hits", n)
	}
	s.SetCacheRules([]CacheRule{{Regex: regexp.MustCompile(`qc_reload`)}})
	if n := r.hits(t, through, q); n != 2 {
		t.Fatalf("a regex rule set while serving: %d hits, want 2", n)
	}
	s.SetCacheRules([]CacheRule{{Regex: regexp.MustCompile(`no_such_table`)}})
	if n := r.hits(t, through, q); n != 0 {
		t.Fatalf("the rule replaced by one that does not match: %d hits", n)
	}
	s.SetCacheRules(nil)
	if n := r.hits(t, through, q); n != 0 {
		t.Fatalf("rules removed: %d hits", n)
	}
}

// cacheRig is a table (id INT PRIMARY KEY, c VARCHAR(10)) on the shared MariaDB and the SQL door in front of it
// with a result cache.
type cacheRig struct {
	addr  string  // MariaDB's
	db    *sql.DB // direct
	reg   *validity.Registry
	cache *qcache.Cache
}

func newCacheRig(t *testing.T, table, rows string) *cacheRig {
	t.Helper()
	m := mariadb(t)
	r := &cacheRig{addr: m.Addr, db: open(t, "app", "secret", m.Addr, ""), reg: validity.NewRegistry()}
	r.cache = qcache.New(qcache.Options{Registry: r.reg})
	mustExec(t, r.db, "DROP TABLE IF EXISTS "+table)
	mustExec(t, r.db, "CREATE TABLE "+table+" (id INT PRIMARY KEY, c VARCHAR(10))")
	mustExec(t, r.db, "INSERT INTO "+table+" VALUES "+rows)
	return r
}

// start serves the SQL door with the rig's cache and rules, and returns its address.
func (r *cacheRig) start(t *testing.T, rules []CacheRule) string {
	t.Helper()
	_, addr := startProxyOpts(t, testConfig(r.addr).with(t, func(o *Options) { o.Validity, o.Cache, o.CacheRules = r.reg, r.cache, rules }))
	return addr
}

// hits runs q three times through db and returns how many of the runs the cache answered.
func (r *cacheRig) hits(t *testing.T, db *sql.DB, q string) int64 {
	t.Helper()
	before := r.cache.Stats().Hits
	for range 3 {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	return r.cache.Stats().Hits - before
}

// TestRepliesWithWarningsAreNotCached: a read whose reply carries warnings goes to the backend every time, so the
// client's SHOW WARNINGS after it always shows what the backend said; the same read without warnings is cached.
func TestRepliesWithWarningsAreNotCached(t *testing.T) {
	r := newCacheRig(t, "qc_warn", "(1, 'one')")
	addr := r.start(t, nil)
	through := open(t, "app", "secret", addr, "")
	if n := r.hits(t, through, "SELECT c + 0 FROM qc_warn WHERE id = 1"); n != 0 { // 'one' + 0: truncated DOUBLE
		t.Errorf("a read with a warning: %d cache hits, want 0", n)
	}
	if n := r.hits(t, through, "SELECT c FROM qc_warn WHERE id = 1"); n != 2 {
		t.Errorf("the same read without warnings: %d cache hits, want 2", n)
	}
}

// TestTTLOnlyGroup: with no binlog follower on the group (invalidate = "ttl"), a point select is cached for the
// group's ttl: a write made directly in MySQL is seen once that ttl is over, never later; a write through keyway
// still drops the entry at once.
func TestTTLOnlyGroup(t *testing.T) {
	r := newCacheRig(t, "qc_ttl", "(1, 'one')")
	_, addr := startProxyOpts(t, testConfig(r.addr).with(t, func(o *Options) {
		o.Validity, o.Cache, o.TTLOnly = r.reg, r.cache, map[string]time.Duration{"main": time.Second}
	}))
	through := open(t, "app", "secret", addr, "")
	read := func() string {
		t.Helper()
		var c string
		if err := through.QueryRow("SELECT c FROM qc_ttl WHERE id = 1").Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if n := r.hits(t, through, "SELECT c FROM qc_ttl WHERE id = 1"); n != 2 {
		t.Fatalf("a point select of a TTL-only group: %d cache hits of 3, want 2", n)
	}
	mustExec(t, r.db, "UPDATE qc_ttl SET c = 'two' WHERE id = 1") // directly: nothing tells keyway
	changed := time.Now()
	for read() != "two" {
		// Generous against a loaded machine: without expiry the new value never shows at all.
		if time.Since(changed) > 5*time.Second {
			t.Fatal("a direct write was not seen within the group's ttl of 1s (nor 4s after)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	read() // cached again
	mustExec(t, through, "UPDATE qc_ttl SET c = 'three' WHERE id = 1")
	if got := read(); got != "three" {
		t.Fatalf("after a write through keyway: %q, want three at once", got)
	}
}

// TestMariaDBMetadataCache: a client that asks for MariaDB's metadata cache (MARIADB_CLIENT_CACHE_METADATA, as
// libmariadb does: sysbench, the mariadb CLI) gets it through keyway as it would from MariaDB. Every column count
// carries the byte that says whether the definitions follow; a relayed execute of a prepared statement whose
// definitions the client has leaves them out; executes answered from the cache come whole; keyway's own result sets
// say their definitions follow. A client that did not ask is never answered from a reply captured for one that did.
func TestMariaDBMetadataCache(t *testing.T) {
	r := newCacheRig(t, "qc_meta", "(1, 'first'), (2, 'second')")
	addr := r.start(t, nil)
	// keyway offers the capability once it knows the backend has it: the first session dials the backend.
	plain := newRawClient(t, addr, "app", "secret", 0)
	if _, err := plain.query("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if plain.c.ExtCapabilities != 0 {
		t.Fatalf("a client that did not ask negotiated extended capabilities %#x", plain.c.ExtCapabilities)
	}

	a := newRawClientExt(t, addr, "app", "secret", 0, mysqlwire.MariaCacheMetadata)
	if a.c.ExtCapabilities != mysqlwire.MariaCacheMetadata {
		t.Fatalf("negotiated extended capabilities %#x, want MARIADB_CLIENT_CACHE_METADATA (%#x): keyway offered %#x",
			a.c.ExtCapabilities, mysqlwire.MariaCacheMetadata, a.info.ExtCapabilities)
	}
	if rows, err := a.query("SELECT c FROM qc_meta ORDER BY id"); err != nil || strings.Join(rows, ",") != "first,second" || !a.lastDefs {
		t.Fatalf("text query: %q %v, definitions %v", rows, err, a.lastDefs)
	}
	if _, err := a.query("SHOW KEYWAY CANDIDATES"); err != nil || !a.lastDefs { // (rows or none, read to the end)
		t.Fatalf("keyway's own result set: %v, definitions %v", err, a.lastDefs)
	}

	// Relayed (a range read is not a key-value read): the second execute comes without definitions.
	scan := a.prepareStmt("SELECT c FROM qc_meta WHERE id >= ? ORDER BY id")
	for i := range 2 {
		got := a.executeOne(executeInt(scan, 1, i == 0))
		if !strings.Contains(got, "first") || !strings.Contains(got, "second") {
			t.Fatalf("relayed execute %d: %q", i+1, got)
		}
		if i == 1 && a.lastDefs {
			t.Errorf("relayed execute %d came with the column definitions the client has", i+1)
		}
	}

	// Cached: filled by this client, then a hit, whole.
	point := a.prepareStmt("SELECT c FROM qc_meta WHERE id = ?")
	hits := r.cache.Stats().Hits
	for i := range 3 {
		if got := a.executeOne(executeInt(point, 2, i == 0)); !strings.Contains(got, "second") {
			t.Fatalf("point execute %d: %q", i+1, got)
		}
	}
	if r.cache.Stats().Hits == hits {
		t.Fatalf("no execute was answered from the cache")
	}
	// The same statement from the client that did not ask: its own reply, definitions and all.
	id := plain.prepareStmt("SELECT c FROM qc_meta WHERE id = ?")
	for i := range 2 {
		if got := plain.executeOne(executeInt(id, 2, i == 0)); !strings.Contains(got, "second") || !plain.lastDefs {
			t.Fatalf("plain client's execute %d: %q, definitions %v", i+1, got, plain.lastDefs)
		}
	}
}

package memcache

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/engine"
)

// binRunDoor is a memcache door over a private MariaDB: container "default"
// (db_only, so every get reads the table) and container "off" on the same
// table with gets disabled, for a key error that is not a miss. Rows r<i>
// exist for i not divisible by 3, with flags i and cas 1000+i; row "large"
// holds a value past largeValue, which is written out from the item.
type binRunDoor struct {
	srv  *Server
	root *sql.DB // for the server's status counters
}

func newBinRunDoor(t *testing.T) *binRunDoor {
	t.Helper()
	stmts := []string{"CREATE TABLE test.binrun (k VARCHAR(64) PRIMARY KEY, v MEDIUMTEXT, f INT UNSIGNED NOT NULL, c BIGINT UNSIGNED NOT NULL)"}
	for i := 0; i < 50; i++ {
		if i%3 != 0 {
			stmts = append(stmts, fmt.Sprintf("INSERT INTO test.binrun VALUES ('r%d', 'value %d', %d, %d)", i, i, i, 1000+i))
		}
	}
	stmts = append(stmts, fmt.Sprintf("INSERT INTO test.binrun VALUES ('large', '%s', 7, 7)", strings.Repeat("L", 3*largeValue)))
	root, db, eng := newTableRig(t, stmts...)
	var tables []*engine.Table
	for name, get := range map[string]container.Policy{"default": container.DBOnly, "off": container.Disabled} {
		c, err := container.Open(context.Background(), db, container.Def{Name: name, Schema: "test", Table: "binrun",
			KeyColumn: "k", ValueColumns: []string{"v"}, FlagsColumn: "f", CASColumn: "c"}, container.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		tables = append(tables, eng.NewContainer(engine.ContainerOptions{Container: c,
			Policies: container.Policies{Get: get, Set: container.DBOnly, Delete: container.DBOnly, Flush: container.CacheOnly}}))
	}
	eng.SetContainers(tables, "default")
	return &binRunDoor{srv: NewServer(eng, Options{}), root: root}
}

// selects is MariaDB's count of SELECT statements run so far.
func (d *binRunDoor) selects(t *testing.T) int {
	t.Helper()
	var name string
	var n int
	if err := d.root.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_select'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// feed answers in on a fresh connection, delivered in the given chunks (as
// reads would cut it), and returns the replies and how many SELECTs the
// table saw meanwhile.
func (d *binRunDoor) feed(t *testing.T, in []byte, cuts ...int) (out []byte, queries int) {
	t.Helper()
	before := d.selects(t)
	c := newConn(d.srv, nil)
	prev := 0
	for _, cut := range append(cuts, len(in)) {
		if err := feedConn(t, c, in[prev:cut], cut-prev); err != nil {
			t.Fatalf("feed: %v", err)
		}
		prev = cut
	}
	return bytes.Clone(c.out), d.selects(t) - before
}

// withoutNoops drops the noop replies from a reply stream.
func withoutNoops(t *testing.T, b []byte) []byte {
	t.Helper()
	var out []byte
	for len(b) > 0 {
		r, n, ok := parseResp(b)
		if !ok {
			t.Fatalf("malformed reply stream % x", b)
		}
		if r.op != opNoop {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// getRun is requests as a client pipelines them, each with its own opaque.
func getRun(ops []byte, keys []string) []binReq {
	rs := make([]binReq, len(keys))
	for i, k := range keys {
		rs[i] = req(ops[i%len(ops)], k, "")
		rs[i].opaque = uint32(0x1000 + i)
	}
	return rs
}

// pipelined is the requests back to back, then a noop.
func pipelined(rs []binReq) []byte {
	var b []byte
	for _, r := range rs {
		b = append(b, r.bytes()...)
	}
	return append(b, req(opNoop, "", "").bytes()...)
}

// oneByOne is each request followed by a noop: every get is a run of one,
// answered by binGet alone, the path before runs were batched.
func oneByOne(rs []binReq) []byte {
	var b []byte
	for _, r := range rs {
		b = append(b, r.bytes()...)
		b = append(b, req(opNoop, "", "").bytes()...)
	}
	return b
}

// TestBinaryGetRun: a pipelined run of gets is answered with one table
// query per container, and its replies are byte for byte those of the same
// gets answered one at a time, whole, split across reads, and with key
// errors among them.
func TestBinaryGetRun(t *testing.T) {
	d := newBinRunDoor(t)
	keys := make([]string, 50)
	for i := range keys {
		keys[i] = fmt.Sprintf("r%d", i)
	}

	t.Run("getkq run is one query", func(t *testing.T) {
		rs := getRun([]byte{opGetKQ}, keys)
		batched, q := d.feed(t, pipelined(rs))
		if q != 1 {
			t.Errorf("50 getkq then noop: %d SELECTs, want 1", q)
		}
		serial, q := d.feed(t, oneByOne(rs))
		if q != 50 {
			t.Errorf("50 getkq each followed by noop: %d SELECTs, want 50", q)
		}
		// The hits, in order, with their keys, flags, cas and opaques; then the noop.
		b := batched
		for i := range keys {
			if i%3 == 0 {
				continue // a quiet miss says nothing
			}
			r, n, ok := parseResp(b)
			if !ok || r.op != opGetKQ || r.status != statusOK || string(r.key) != keys[i] ||
				string(r.value) != fmt.Sprintf("value %d", i) || r.flags() != uint32(i) || r.cas != uint64(1000+i) || r.opaque != uint32(0x1000+i) {
				t.Fatalf("reply for %s: %+v", keys[i], r)
			}
			b = b[n:]
		}
		if r, n, ok := parseResp(b); !ok || r.op != opNoop || n != len(b) {
			t.Fatalf("after the hits: % x, want the noop reply alone", b)
		}
		if !bytes.Equal(withoutNoops(t, batched), withoutNoops(t, serial)) {
			t.Fatalf("batched replies differ from one-by-one:\n% x\n% x", batched, serial)
		}
	})

	t.Run("run cut across reads", func(t *testing.T) {
		rs := getRun([]byte{opGetKQ, opGetK, opGetQ, opGet}, keys)
		in := pipelined(rs)
		whole, _ := d.feed(t, in)
		// The first read ends inside the 31st request: 30 gets are complete.
		cut := len(pipelined(rs[:30])) - binaryHeaderLen + binaryHeaderLen/2
		split, q := d.feed(t, in, cut)
		if q != 2 {
			t.Errorf("run cut in two: %d SELECTs, want 2", q)
		}
		if !bytes.Equal(split, whole) {
			t.Fatalf("replies to a run cut in two differ from the whole run:\n% x\n% x", split, whole)
		}
		byByte := func() []byte {
			c := newConn(d.srv, nil)
			if err := feedConn(t, c, in, 1); err != nil {
				t.Fatal(err)
			}
			return c.out
		}()
		if !bytes.Equal(byByte, whole) {
			t.Fatalf("replies to a run fed byte by byte differ from the whole run:\n% x\n% x", byByte, whole)
		}
	})

	t.Run("mixed run with key errors over TCP", func(t *testing.T) {
		addr := serveTest(t, d.srv)
		mixed := []string{"r1", "r3", "@@nosuch.r1", "r2", "@@off.r1", "r4", "large", "r6", "@@default.r5", "r7", "r9", "r10", "r12"}
		rs := getRun([]byte{opGetKQ, opGetQ, opGetK, opGet, opGetKQ}, mixed)
		c := dialBinary(t, addr)
		readToNoop := func() []byte {
			var b []byte
			for {
				r := c.recv()
				if r.op == opNoop {
					return b
				}
				b = append(b, respBytes(r)...)
			}
		}
		c.write(pipelined(rs))
		batched := readToNoop()
		var serial []byte
		for _, r := range rs {
			c.send(r, req(opNoop, "", ""))
			serial = append(serial, readToNoop()...)
		}
		if !bytes.Equal(batched, serial) {
			t.Fatalf("batched replies differ from one-by-one:\n% x\n% x", batched, serial)
		}
		// The run held hits, misses and two key errors: check they were answered as such.
		var hits, misses, errs int
		for b := batched; len(b) > 0; {
			r, n, _ := parseResp(b)
			switch r.status {
			case statusOK:
				hits++
			case statusKeyNotFound:
				misses++
			default:
				errs++
				if r.status != statusInvalid || !bytes.Contains(r.value, []byte("nosuch")) && !bytes.Contains(r.value, []byte("disabled")) {
					t.Errorf("error reply %#04x %q", r.status, r.value)
				}
			}
			b = b[n:]
		}
		// Hits: r1 r2 r4 large @@default.r5 r7 r10; non-quiet misses: r6 and r12 (getk; r3 and r9 are quiet); errors: 2.
		if hits != 7 || misses != 2 || errs != 2 {
			t.Fatalf("%d hits, %d misses, %d errors; want 7, 2, 2", hits, misses, errs)
		}
	})
}

// respBytes re-encodes a parsed reply.
func respBytes(r binResp) []byte {
	b := []byte{r.magic, r.op, byte(len(r.key) >> 8), byte(len(r.key)), byte(len(r.extras)), 0, byte(r.status >> 8), byte(r.status)}
	b = be32append(b, uint32(len(r.extras)+len(r.key)+len(r.value)))
	b = be32append(b, r.opaque)
	b = append(b, byte(r.cas>>56), byte(r.cas>>48), byte(r.cas>>40), byte(r.cas>>32), byte(r.cas>>24), byte(r.cas>>16), byte(r.cas>>8), byte(r.cas))
	b = append(b, r.extras...)
	b = append(b, r.key...)
	return append(b, r.value...)
}

func be32append(b []byte, v uint32) []byte { return append(b, be32(v)...) }

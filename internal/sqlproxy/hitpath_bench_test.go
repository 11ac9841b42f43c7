package sqlproxy

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/validity"
)

// BenchmarkCachedHit measures a result-cache hit's path inside keyway, from the command read to the reply written:
// a raw client that allocates nothing sends a point select (text, and a prepared statement's execute) whose reply
// is cached, and reads the reply whole. allocs/op is keyway's (the client makes none) and writes/op counts the
// write system calls of the process per statement, the client's one included.
func BenchmarkCachedHit(b *testing.B) {
	m := mariadb(b)
	reg := validity.NewRegistry()
	cache := qcache.New(qcache.Options{Registry: reg})
	_, addr := startProxyOpts(b, testConfig(m.Addr).with(b, func(o *Options) { o.Validity, o.Cache = reg, cache }))
	benchTable(b, open(b, "app", "secret", addr, ""))

	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	c := mysqlwire.NewConn(nc)
	if _, err := mysqlwire.ClientHandshake(c, &mysqlwire.ClientConfig{User: "app", Password: "secret", DB: "test",
		Capabilities: mysqlwire.ClientDeprecateEOF}); err != nil {
		b.Fatal(err)
	}
	// From here the client reads and writes nc itself: the handshake left nothing buffered (keyway sends
	// nothing before a command).
	buf := make([]byte, 64<<10)
	prepare := packet(comStmtPrepare, []byte("SELECT c FROM bench_point WHERE id = ?"))
	reply := roundTrip(b, nc, prepare, buf, true)
	stmtID := binary.LittleEndian.Uint32(reply[5:9])
	exec := packet(comStmtExecute, executeInt(stmtID, 7, true))
	query := packet(comQuery, []byte("SELECT c FROM bench_point WHERE id = 7"))

	for _, bc := range []struct {
		name string
		cmd  []byte
	}{{"query", query}, {"execute", exec}} {
		b.Run(bc.name, func(b *testing.B) {
			roundTrip(b, nc, bc.cmd, buf, false) // fills the entry
			hits := cache.Stats().Hits
			w0 := processWrites(b)
			b.ReportAllocs()
			for b.Loop() {
				roundTrip(b, nc, bc.cmd, buf, false)
			}
			b.ReportMetric(float64(processWrites(b)-w0)/float64(b.N), "writes/op")
			if got := cache.Stats().Hits - hits; got < int64(b.N) {
				b.Fatalf("%d hits for %d statements: the benchmark did not measure the cached path", got, b.N)
			}
		})
	}
}

// packet frames a command as the first packet of its exchange (sequence id 0).
func packet(cmd byte, body []byte) []byte {
	p := make([]byte, 5, 5+len(body))
	n := 1 + len(body)
	p[0], p[1], p[2], p[3], p[4] = byte(n), byte(n>>8), byte(n>>16), 0, cmd
	return append(p, body...)
}

// roundTrip writes cmd and reads its whole reply into buf without allocating, and returns the reply's first packet.
// The reply is an ERR, an OK, a prepare's OK with its definitions (prepared), or a result set with
// CLIENT_DEPRECATE_EOF framing.
func roundTrip(b *testing.B, nc net.Conn, cmd, buf []byte, prepared bool) []byte {
	if _, err := nc.Write(cmd); err != nil {
		b.Fatal(err)
	}
	off := 0
	next := func() []byte {
		if _, err := io.ReadFull(nc, buf[off:off+4]); err != nil {
			b.Fatal(err)
		}
		n := int(buf[off]) | int(buf[off+1])<<8 | int(buf[off+2])<<16
		if _, err := io.ReadFull(nc, buf[off+4:off+4+n]); err != nil {
			b.Fatal(err)
		}
		p := buf[off : off+4+n]
		off += 4 + n
		return p
	}
	first := next()
	switch {
	case first[4] == mysqlwire.HeaderERR:
		b.Fatalf("error: %v", mysqlwire.ParseError(first[4:]))
	case first[4] == mysqlwire.HeaderOK && prepared: // statement id, columns, params: definitions, EOF-less
		cols, params := binary.LittleEndian.Uint16(first[9:]), binary.LittleEndian.Uint16(first[11:])
		for range int(cols) + int(params) {
			next()
		}
	case first[4] == mysqlwire.HeaderOK:
	default:
		for range int(first[4]) { // the definitions (fewer than 251 columns)
			next()
		}
		for p := next(); p[4] != mysqlwire.HeaderEOF; p = next() {
		}
	}
	return first
}

// processWrites is syscw of /proc/self/io: the write system calls of the process so far.
func processWrites(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no syscw in /proc/self/io")
	return 0
}

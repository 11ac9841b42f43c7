package main

// Meta commands and error replies on table-backed containers, over a raw
// text connection, with the rows read back through SQL.

import (
	"bufio"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

// textConn speaks the text protocol one request at a time.
type textConn struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dialText(t *testing.T, addr string) *textConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &textConn{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// do sends req (lines joined with \r\n) and returns the reply's first line
// and, for a VA or VALUE reply, the data line after it.
func (c *textConn) do(req ...string) (line, data string) {
	c.t.Helper()
	c.nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.nc.Write([]byte(strings.Join(req, "\r\n") + "\r\n")); err != nil {
		c.t.Fatal(err)
	}
	read := func() string {
		s, err := c.r.ReadString('\n')
		if err != nil {
			c.t.Fatalf("after %q: %v", req, err)
		}
		return strings.TrimRight(s, "\r\n")
	}
	line = read()
	switch {
	case strings.HasPrefix(line, "VA "):
		data = read()
	case strings.HasPrefix(line, "VALUE "):
		data = read()
		if end := read(); end != "END" {
			c.t.Fatalf("after %q: %q, want END", req, end)
		}
	}
	return line, data
}

func TestMetaCommandsOnTables(t *testing.T) {
	for _, policy := range []string{"db_only", "caching"} {
		t.Run(policy, func(t *testing.T) {
			kw, db := startContainers(t, policy)
			c := dialText(t, kw.Addr)
			expect := func(wantLine, wantData string, req ...string) string {
				t.Helper()
				line, data := c.do(req...)
				if !regexp.MustCompile("^"+wantLine+"$").MatchString(line) || data != wantData {
					t.Fatalf("%q: %q %q, want %q %q\nkeyway:\n%s", req, line, data, wantLine, wantData, kw.Output())
				}
				return line
			}
			row := func(key, want string) {
				t.Helper()
				if got := tableValue(t, db, key); got != want {
					t.Fatalf("row %s = %q, want %q", key, got, want)
				}
			}

			expect("HD", "", "ms @@aaa.m 2 F7", "hi")
			row("m", "hi")
			line := expect(`VA 2 f7 c\d+`, "hi", "mg @@aaa.m v f c")
			cas := line[strings.LastIndex(line, " c")+2:]
			expect("HD", "", "ms @@aaa.m 3 C"+cas, "new")
			expect("EX", "", "ms @@aaa.m 3 C"+cas, "old")
			row("m", "new")
			expect("NS", "", "ms @@aaa.m 1 ME", "x")  // add (mode E) on an existing row
			expect("HD", "", "ms @@aaa.m 2 MA", "+a") // append
			row("m", "new+a")
			expect("VA 5 t-1", "new+a", "mg @@aaa.m v t")
			expect("HD", "", "mg @@aaa.m T100")
			expect(`VA 5 t(99|100)`, "new+a", "mg @@aaa.m v t")

			expect("HD", "", "ma @@aaa.cnt N0 J10")
			row("cnt", "10")
			expect("VA 2", "11", "ma @@aaa.cnt v")
			expect("VA 1", "6", "ma @@aaa.cnt v MD D5")
			expect("NF", "", "ma @@aaa.nocounter")

			expect("HD", "", "md @@aaa.m")
			row("m", "<no row>")
			expect("EN", "", "mg @@aaa.m v")
			expect("NF", "", "md @@aaa.m")

			// Cache-only flags are refused, not ignored.
			expect(`CLIENT_ERROR container "aaa": mg flags N, R and E are not supported on a table.*`, "", "mg @@aaa.m v N30")
			expect(`CLIENT_ERROR .*md flags C and I.*`, "", "md @@aaa.cnt I")
			row("cnt", "6")

			// Errors as memcached words them, with the reason.
			long := strings.Repeat("k", 33)
			expect(`CLIENT_ERROR container "aaa": key too long for the key column.*`, "", "get @@aaa."+long)
			expect(`CLIENT_ERROR .*key too long.*`, "", "mg @@aaa."+long+" v")
			expect(`CLIENT_ERROR .*key too long.*`, "", "set @@aaa."+long+" 0 0 1", "x")
			big := strings.Repeat("v", 1025)
			expect(`SERVER_ERROR object too large for cache: container "aaa": value too long for the column: column c2 holds 1024 characters, the value has 1025`, "", "set @@aaa.big 0 0 1025", big)
			expect(`SERVER_ERROR object too large for cache: .*c2.*`, "", "ms @@aaa.big 1025", big)
			row("big", "<no row>")
			expect("STORED", "", "set @@aaa.word 0 0 3", "abc")
			expect("CLIENT_ERROR cannot increment or decrement non-numeric value", "", "incr @@aaa.word 1")
			expect(`CLIENT_ERROR no such container "nope".*`, "", "get @@nope.k")
			expect("STORED", "", "set @@aaa.after 0 0 2", "ok") // the connection is still good
			row("after", "ok")
		})
	}
}

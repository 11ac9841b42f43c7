package mysqlwire

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// loginApp logs in to m as the app user with the given extra capabilities.
func loginApp(t *testing.T, addr string, caps uint32) *Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(nc)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := ClientHandshake(c, &ClientConfig{User: "app", Password: "secret", Capabilities: caps}); err != nil {
		t.Fatal(err)
	}
	if got := c.Capabilities & ClientSessionTrack; got != caps&ClientSessionTrack {
		t.Fatalf("negotiated CLIENT_SESSION_TRACK = %x, asked %x", got, caps&ClientSessionTrack)
	}
	return c
}

// execOK sends a statement and returns its reply, which must be one OK packet (copied).
func execOK(t *testing.T, c *Conn, query string) []byte {
	t.Helper()
	if err := c.WriteCommand(0x03, []byte(query)); err != nil {
		t.Fatal(err)
	}
	p, err := c.ReadPacket()
	if err != nil {
		t.Fatal(err)
	}
	if len(p) == 0 || p[0] != HeaderOK {
		if len(p) > 0 && p[0] == HeaderERR {
			t.Fatalf("%s: %v", query, ParseError(p))
		}
		t.Fatalf("%s: reply % x is not an OK", query, p)
	}
	return bytes.Clone(p)
}

// selectOne runs a query returning one row of one column (no CLIENT_DEPRECATE_EOF) and returns the value.
func selectOne(t *testing.T, c *Conn, query string) string {
	t.Helper()
	if err := c.WriteCommand(0x03, []byte(query)); err != nil {
		t.Fatal(err)
	}
	var value string
	eofs := 0
	for i := 0; eofs < 2; i++ {
		p, err := c.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case len(p) > 0 && p[0] == HeaderERR:
			t.Fatalf("%s: %v", query, ParseError(p))
		case len(p) > 0 && p[0] == HeaderEOF && len(p) < 9:
			eofs++
		case eofs == 1: // the row
			v, _, ok := readLenEncString(p)
			if !ok {
				t.Fatalf("%s: row % x", query, p)
			}
			value = string(v)
		}
	}
	return value
}

// Against a real MariaDB: the session-state changes ParseOK reports for SET NAMES, SET time_zone, SET sql_mode and
// USE are the values the server then states, and StripSessionState turns each OK packet into the very bytes the
// server sends a connection that did not negotiate CLIENT_SESSION_TRACK for the same statement.
func TestSessionTrackMariaDB(t *testing.T) {
	m := testenv.NewMariaDB(t)
	tracking := loginApp(t, m.Addr, ClientSessionTrack)
	plain := loginApp(t, m.Addr, 0)

	type change struct {
		typ         byte
		name, value string
	}
	run := func(query string) []change {
		t.Helper()
		pt, pp := execOK(t, tracking, query), execOK(t, plain, query)
		ok, err := ParseOK(pt, tracking.Capabilities)
		if err != nil {
			t.Fatalf("%s: ParseOK(% x): %v", query, pt, err)
		}
		var got []change
		if err := ok.SessionChanges(func(c SessionChange) bool {
			got = append(got, change{c.Type, string(c.Name), string(c.Value)})
			return true
		}); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		if okPlain, err := ParseOK(pp, 0); err != nil || okPlain.Status&StatusSessionStateChanged != 0 {
			t.Fatalf("%s: the plain connection's OK % x: %+v, %v", query, pp, okPlain, err)
		}
		stripped, err := StripSessionState(bytes.Clone(pt))
		if err != nil {
			t.Fatalf("%s: StripSessionState: %v", query, err)
		}
		if !bytes.Equal(stripped, pp) {
			t.Fatalf("%s: stripped\n% x\nthe server sends a client without session tracking\n% x\n(tracking: % x)",
				query, stripped, pp, pt)
		}
		t.Logf("%s: %d bytes with tracking, %d without; changes %v", query, len(pt), len(pp), got)
		return got
	}
	vars := func(cs []change) map[string]string {
		out := map[string]string{}
		for _, c := range cs {
			switch c.typ {
			case SessionTrackSystemVariables:
				out[c.name] = c.value
			case SessionTrackSchema:
				out["(schema)"] = c.value
			}
		}
		return out
	}
	expect := func(query string, cs []change, want map[string]string) {
		t.Helper()
		got := vars(cs)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q (all: %v)", query, k, got[k], v, got)
			}
		}
	}

	run("SET session_track_system_variables='autocommit,character_set_client,character_set_connection," +
		"character_set_results,time_zone,sql_mode'")
	run("SET session_track_schema=ON")

	q := "SET NAMES latin1"
	expect(q, run(q), map[string]string{
		"character_set_client":     selectOne(t, tracking, "SELECT @@character_set_client"),
		"character_set_connection": selectOne(t, tracking, "SELECT @@character_set_connection"),
		"character_set_results":    selectOne(t, tracking, "SELECT @@character_set_results"),
	})
	if v := selectOne(t, tracking, "SELECT @@character_set_client"); v != "latin1" {
		t.Errorf("character_set_client is %q after SET NAMES latin1", v)
	}
	q = "SET time_zone='+01:00'"
	expect(q, run(q), map[string]string{"time_zone": "+01:00"})
	q = "SET sql_mode=CONCAT(@@sql_mode, ',NO_ZERO_DATE')"
	cs := run(q)
	mode := selectOne(t, tracking, "SELECT @@sql_mode")
	if !bytes.Contains([]byte(mode), []byte("NO_ZERO_DATE")) {
		t.Errorf("sql_mode %q lacks NO_ZERO_DATE", mode)
	}
	expect(q, cs, map[string]string{"sql_mode": mode})
	q = "USE test"
	expect(q, run(q), map[string]string{"(schema)": selectOne(t, tracking, "SELECT DATABASE()")})
	q = "SET autocommit=0"
	expect(q, run(q), map[string]string{"autocommit": "OFF"})
	run("SET autocommit=1")

	// An OK with an info string and a last insert id: session state unchanged, the info stays as it was.
	run("CREATE TEMPORARY TABLE t_track (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	pt := execOK(t, tracking, "INSERT INTO t_track (v) VALUES (1), (2), (3)")
	pp := execOK(t, plain, "INSERT INTO t_track (v) VALUES (1), (2), (3)")
	ok, err := ParseOK(pt, tracking.Capabilities)
	if err != nil || ok.AffectedRows != 3 || ok.LastInsertID != 1 || string(ok.Info) != "Records: 3  Duplicates: 0  Warnings: 0" {
		t.Fatalf("INSERT: %+v, %v (% x)", ok, err, pt)
	}
	okPlain, err := ParseOK(pp, 0)
	if err != nil || string(okPlain.Info) != string(ok.Info) {
		t.Fatalf("INSERT without tracking: %+v, %v (% x)", okPlain, err, pp)
	}
	if stripped, err := StripSessionState(bytes.Clone(pt)); err != nil || !bytes.Equal(stripped, pp) {
		t.Fatalf("INSERT: stripped % x, %v; the server sends % x", stripped, err, pp)
	}
	t.Logf("INSERT with tracking % x, without % x", pt, pp)
}

package memcache

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// readStats sends "stats" and returns the names in order, the values, and
// the reply's length in bytes.
func readStats(t *testing.T, c *testClient) ([]string, map[string]string, int) {
	t.Helper()
	c.send("stats\r\n")
	return readStatsReply(t, c)
}

// readStatsReply reads a stats reply (see readStats).
func readStatsReply(t *testing.T, c *testClient) ([]string, map[string]string, int) {
	t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var names []string
	vals := map[string]string{}
	n := 0
	for {
		line, err := c.br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		n += len(line)
		if line == "END\r\n" {
			return names, vals, n
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "STAT" {
			t.Fatalf("bad stats line %q", line)
		}
		names = append(names, f[1])
		vals[f[1]] = f[2]
	}
}

func statInt(t *testing.T, vals map[string]string, name string) int64 {
	t.Helper()
	v, ok := vals[name]
	if !ok {
		t.Fatalf("stats has no %s", name)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", name, v, err)
	}
	return n
}

// TestStatsTrafficCounters checks the counters of a fresh door and that
// bytes_read, bytes_written and cmd_meta count the traffic.
func TestStatsTrafficCounters(t *testing.T) {
	c := dialTest(t, newTestServer(t))
	// The names and their order are compared with memcached's own by
	// TestStatsFieldsMatchMemcached.
	_, before, reply := readStats(t, c)
	for name, want := range map[string]int64{"accepting_conns": 1, "listen_disabled_num": 0,
		"time_in_listen_disabled_us": 0, "reclaimed": 0, "cmd_meta": 0, "total_connections": 1,
		"rejected_connections": 0, "connection_structures": 2, "read_buf_count": 1,
		"read_buf_bytes": initialReadBuffer, "store_too_large": 0, "slabs_moved": 0, "lru_bumps_dropped": 0} {
		if got := statInt(t, before, name); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	// The first stats request is all that was read so far.
	if got := statInt(t, before, "bytes_read"); got != int64(len("stats\r\n")) {
		t.Errorf("bytes_read = %d, want %d", got, len("stats\r\n"))
	}
	if got := statInt(t, before, "bytes_written"); got != 0 {
		t.Errorf("bytes_written = %d, want 0", got)
	}

	// Traffic: each reply is read before the next request, so it has been
	// written before the next stats is taken.
	sent, got := 0, 0
	for _, x := range []struct{ req, resp string }{
		{"set a 0 0 5\r\nhello\r\n", "STORED\r\n"},
		{"get a\r\n", "VALUE a 0 5\r\nhello\r\nEND\r\n"},
		{"me b\r\n", "EN\r\n"},
		{"mn\r\n", "MN\r\n"},
		{"mg a v\r\n", "VA 5\r\nhello\r\n"},
		{"me a\r\n", ""},
	} {
		c.send(x.req)
		sent += len(x.req)
		if x.resp != "" {
			c.expect(x.resp)
			got += len(x.resp)
			continue
		}
		line, err := c.br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "ME a ") {
			t.Fatalf("me a: %q %v", line, err)
		}
		got += len(line)
	}
	_, after, _ := readStats(t, c)
	if d := statInt(t, after, "bytes_read") - statInt(t, before, "bytes_read"); d != int64(sent+len("stats\r\n")) {
		t.Errorf("bytes_read moved %d, want %d", d, sent+len("stats\r\n"))
	}
	// Written since: the first stats reply and the traffic's replies.
	if d := statInt(t, after, "bytes_written") - statInt(t, before, "bytes_written"); d != int64(reply+got) {
		t.Errorf("bytes_written moved %d, want %d", d, reply+got)
	}
	// memcached 1.6's cmd_meta counts "me" only.
	if d := statInt(t, after, "cmd_meta"); d != 2 {
		t.Errorf("cmd_meta = %d, want 2", d)
	}
}

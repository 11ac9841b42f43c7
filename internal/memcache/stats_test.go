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

// TestStatsTrafficCounters checks the counters memcached 1.6 lists that
// php-memcached and the exporters read are there, in memcached 1.6.18's
// order, and that bytes_read, bytes_written and cmd_meta count the traffic.
func TestStatsTrafficCounters(t *testing.T) {
	c := dialTest(t, newTestServer(t))
	names, before, reply := readStats(t, c)

	// The order memcached 1.6.18 prints them in (those keyway has).
	order := []string{"pid", "uptime", "time", "version", "libevent", "pointer_size",
		"rusage_user", "rusage_system", "max_connections", "curr_connections",
		"total_connections", "rejected_connections", "cmd_get", "cmd_set", "cmd_flush",
		"cmd_touch", "cmd_meta", "get_hits", "get_misses", "get_expired", "delete_misses",
		"delete_hits", "incr_misses", "incr_hits", "decr_misses", "decr_hits", "cas_misses",
		"cas_hits", "cas_badval", "touch_hits", "touch_misses", "auth_cmds", "auth_errors",
		"bytes_read", "bytes_written", "limit_maxbytes", "accepting_conns",
		"listen_disabled_num", "time_in_listen_disabled_us", "threads", "bytes",
		"curr_items", "total_items", "expired_unfetched", "evictions", "reclaimed"}
	if strings.Join(names, " ") != strings.Join(order, " ") {
		t.Errorf("stats fields:\n got %v\nwant %v", names, order)
	}
	for name, want := range map[string]int64{"accepting_conns": 1, "listen_disabled_num": 0,
		"time_in_listen_disabled_us": 0, "reclaimed": 0, "cmd_meta": 0, "total_connections": 1,
		"rejected_connections": 0} {
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

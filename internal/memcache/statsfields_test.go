package memcache

import (
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
)

// statNames reads a text stats reply and returns its statistics' names in
// order, with a class or connection number ("7:chunk_size",
// "items:7:number", "23:addr") written as "N", each name once. For a
// connection's state the value is kept too ("N:state conn_listening").
func statNames(reply string) []string {
	num := regexp.MustCompile(`^(items:)?[0-9]+:`)
	var names []string
	for _, line := range strings.Split(strings.TrimSuffix(reply, "END\r\nMN\r\n"), "\r\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) < 3 || f[0] != "STAT" {
			continue
		}
		name := num.ReplaceAllString(f[1], "${1}N:")
		if strings.HasSuffix(name, ":state") {
			name += " " + f[2]
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// TestStatsFieldsMatchMemcached compares the statistics' names, in order,
// of plain stats and the slabs, items and conns groups between memcached 1.6
// and keyway, each holding one small item, so both report one class.
// (The values differ: memcached's slab classes and ids are its own; keyway's
// are checked by TestStatsGroups.)
func TestStatsFieldsMatchMemcached(t *testing.T) {
	mc := testenv.NewMemcached(t)
	kw := newTestServer(t)
	for _, addr := range []string{mc.Addr, kw} {
		exchange(t, addr, "set sf 0 0 1\r\nx\r\nget sf\r\nmn\r\n")
	}
	for _, group := range []string{"", " slabs", " items", " conns"} {
		send := "stats" + group + "\r\nmn\r\n"
		want, got := statNames(exchange(t, mc.Addr, send)), statNames(exchange(t, kw, send))
		// The setup's connection, closed by the client, may not be gone
		// from a server yet: stats conns is asked again until it is.
		for deadline := time.Now().Add(5 * time.Second); group == " conns" && !slices.Equal(got, want) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			want, got = statNames(exchange(t, mc.Addr, send)), statNames(exchange(t, kw, send))
		}
		if !slices.Equal(got, want) {
			var missing, extra []string
			for _, n := range want {
				if !slices.Contains(got, n) {
					missing = append(missing, n)
				}
			}
			for _, n := range got {
				if !slices.Contains(want, n) {
					extra = append(extra, n)
				}
			}
			t.Errorf("stats%s: names differ\nmissing in keyway: %v\nonly in keyway: %v\nkeyway    %v\nmemcached %v", group, missing, extra, got, want)
		}
	}
}

// statsGroup sends "stats <group>" on c and returns its values by name.
func statsGroup(t *testing.T, c *testClient, group string) map[string]string {
	t.Helper()
	c.send("stats " + group + "\r\n")
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	vals := map[string]string{}
	for {
		line, err := c.br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "END\r\n" {
			return vals
		}
		f := strings.SplitN(strings.TrimSuffix(line, "\r\n"), " ", 3)
		if len(f) != 3 || f[0] != "STAT" {
			t.Fatalf("stats %s: bad line %q", group, line)
		}
		vals[f[1]] = f[2]
	}
}

// TestStatsGroups checks keyway's values in stats slabs and stats items:
// nothing while the store is empty, then the class memcached would keep the
// items in (both are in class 1, memcached's 96-byte chunks), whose counts
// are the store's; and that stats sizes and store_too_large say what keyway
// does. (TestSlabClassesMatchMemcached compares the classes with
// memcached's.)
func TestStatsGroups(t *testing.T) {
	c := dialTest(t, newTestServer(t))
	if v := statsGroup(t, c, "slabs"); len(v) != 2 || v["active_slabs"] != "0" || v["total_malloced"] != "0" {
		t.Errorf("empty stats slabs: %v", v)
	}
	if v := statsGroup(t, c, "items"); len(v) != 0 {
		t.Errorf("empty stats items: %v", v)
	}
	c.send("set a 0 0 5\r\nhello\r\nset bb 0 0 2\r\nhi\r\nget a\r\nget zz\r\nset big 0 0 2000000\r\n")
	c.expect("STORED\r\nSTORED\r\nVALUE a 0 5\r\nhello\r\nEND\r\nEND\r\nSERVER_ERROR object too large for cache\r\n")
	c.send(strings.Repeat("x", 2000000) + "\r\n")
	mem := strconv.FormatInt(store.Size(1, 5)+store.Size(2, 2), 10)
	want := map[string]string{"1:chunk_size": "96", "1:chunks_per_page": "10922", "1:total_pages": "1",
		"1:total_chunks": "10922", "1:used_chunks": "2", "1:free_chunks": "10920", "1:free_chunks_end": "0",
		"1:get_hits": "0", "1:cmd_set": "0", "1:delete_hits": "0", "1:incr_hits": "0", "1:decr_hits": "0",
		"1:cas_hits": "0", "1:cas_badval": "0", "1:touch_hits": "0", "active_slabs": "1", "total_malloced": mem}
	if got := statsGroup(t, c, "slabs"); !maps.Equal(got, want) {
		t.Errorf("stats slabs:\n got %v\nwant %v", got, want)
	}
	items := statsGroup(t, c, "items")
	for name, want := range map[string]string{"number": "2", "number_hot": "0", "number_warm": "0",
		"number_cold": "2", "mem_requested": mem, "evicted": "0", "hits_to_cold": "0", "outofmemory": "0"} {
		if got := items["items:1:"+name]; got != want {
			t.Errorf("items:1:%s = %q, want %q", name, got, want)
		}
	}
	if age, err := strconv.Atoi(items["items:1:age"]); err != nil || age < 0 {
		t.Errorf("items:1:age = %q", items["items:1:age"])
	}
	if len(items) != 28 {
		t.Errorf("stats items has %d fields, memcached 1.6.18 has 28: %v", len(items), items)
	}
	if v := statsGroup(t, c, "sizes"); len(v) != 1 || v["sizes_status"] != "disabled" {
		t.Errorf("stats sizes: %v", v)
	}
	_, vals, _ := readStats(t, c)
	if statInt(t, vals, "store_too_large") != 1 || statInt(t, vals, "store_no_memory") != 0 {
		t.Errorf("store_too_large %s, store_no_memory %s; want 1 and 0", vals["store_too_large"], vals["store_no_memory"])
	}
}

// TestStatsConns checks stats conns shows the listener and every client
// connection with memcached's state names: one that has sent nothing, one
// waiting for its next command, one in the middle of a data block, one in
// the middle of a line, and the one asking.
func TestStatsConns(t *testing.T) {
	addr := newTestServer(t)
	fresh := dialTest(t, addr)
	idle := dialTest(t, addr)
	idle.send("mn\r\n")
	idle.expect("MN\r\n")
	partial := dialTest(t, addr)
	partial.send("set p 0 0 10\r\nabc")
	halfLine := dialTest(t, addr)
	halfLine.send("get abc")
	c := dialTest(t, addr)
	local := func(tc *testClient) string { return "tcp:" + tc.nc.LocalAddr().String() }
	want := map[string]string{local(fresh): "conn_new_cmd", local(idle): "conn_read",
		local(partial): "conn_nread", local(halfLine): "conn_read", local(c): "conn_parse_cmd"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := statsGroup(t, c, "conns")
		got := map[string]string{}
		listeners := 0
		for name, val := range v {
			id, field, _ := strings.Cut(name, ":")
			switch field {
			case "addr":
				if v[id+":state"] == "conn_listening" {
					listeners++
					if val != "tcp:"+addr {
						t.Errorf("listener addr %q, want tcp:%s", val, addr)
					}
					continue
				}
				got[val] = v[id+":state"]
				if v[id+":listen_addr"] != "tcp:"+addr {
					t.Errorf("%s: listen_addr %q", val, v[id+":listen_addr"])
				}
				if s, err := strconv.Atoi(v[id+":secs_since_last_cmd"]); err != nil || s < 0 {
					t.Errorf("%s: secs_since_last_cmd %q", val, v[id+":secs_since_last_cmd"])
				}
			}
		}
		if listeners == 1 && maps.Equal(got, want) {
			return
		}
		// Another connection's goroutine may not have reached its read yet.
		if time.Now().After(deadline) {
			t.Fatalf("stats conns: %d listeners, connections %v, want %v", listeners, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// statPairs reads a text stats reply into its names, in order, and values.
func statPairs(reply string) ([]string, map[string]string) {
	var names []string
	vals := map[string]string{}
	for _, line := range strings.Split(reply, "\r\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) == 3 && f[0] == "STAT" {
			names = append(names, f[1])
			vals[f[1]] = f[2]
		}
	}
	return names, vals
}

// TestStatsSettingsMatchMemcached compares stats settings with memcached
// 1.6's, both started with the same memory limit, connection limit and item
// size limit: the same names in the same order (keyway adds two of its own
// at the end), and the same values but for the settings where keyway's
// differ from memcached's own defaults, each checked for keyway's value.
func TestStatsSettingsMatchMemcached(t *testing.T) {
	mc := testenv.NewMemcached(t, "-m", "64", "-c", "64", "-I", "1m")
	kw := newTestServer(t)
	want, mcVals := statPairs(exchange(t, mc.Addr, "stats settings\r\nmn\r\n"))
	got, kwVals := statPairs(exchange(t, kw, "stats settings\r\nmn\r\n"))
	if len(want) < 70 {
		t.Fatalf("memcached lists %d settings: %v", len(want), want)
	}
	if own := []string{"eviction_policy", "persistent"}; len(got) != len(want)+len(own) ||
		!slices.Equal(got[:len(want)], want) || !slices.Equal(got[len(want):], own) {
		t.Errorf("stats settings names differ\nkeyway    %v\nmemcached %v + %v", got, want, own)
	}
	// Where keyway's value is its own: the port, threads and listen
	// backlog it runs with, and machinery it does not have.
	_, general := statPairs(exchange(t, kw, "stats\r\nmn\r\n"))
	own := map[string]string{
		"tcpport": kw[strings.LastIndexByte(kw, ':')+1:], "num_threads": general["threads"],
		"num_threads_per_udp": general["threads"], "tcp_backlog": strconv.FormatInt(listenBacklog(), 10),
		"hash_algorithm": "xxhash64", "slab_reassign": "no", "slab_automove": "0",
		"lru_maintainer_thread": "no", "lru_segmented": "no",
		"read_buf_mem_limit": strconv.FormatInt(defaultInflightBytes(64<<20, 1<<20), 10),
		"eviction_policy":    "sieve", "persistent": "false",
	}
	for _, name := range got {
		w, ok := own[name]
		if !ok {
			w = mcVals[name]
		}
		if kwVals[name] != w {
			t.Errorf("stats settings %s = %q, want %q", name, kwVals[name], w)
		}
	}
	// Spot checks of the values both share, so a memcached that changed
	// its defaults is noticed rather than followed.
	for name, w := range map[string]string{"maxbytes": "67108864", "maxconns": "64", "item_size_max": "1048576",
		"inter": "127.0.0.1", "cas_enabled": "yes", "binding_protocol": "auto-negotiate",
		"auth_enabled_sasl": "no", "flush_enabled": "yes", "evictions": "on", "slab_chunk_max": "524288"} {
		if kwVals[name] != w {
			t.Errorf("stats settings %s = %q, want %q", name, kwVals[name], w)
		}
	}
}

// TestStatsSettingsFollowOptions checks the settings keyway takes from its
// configuration: authentication, TLS, the detail switch and a limit change.
func TestStatsSettingsFollowOptions(t *testing.T) {
	st, err := store.Open(store.Options{MemoryLimit: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := NewServer(engine.New(st, engine.Options{MaxItemSize: 2 << 20}), Options{MaxConnections: 10,
		Users: []User{{Name: "u", Password: "p"}}, MaxInflightBytes: 5 << 20})
	addr := serveTest(t, srv)
	_, v := statPairs(exchange(t, addr, "set u 0 0 3\r\nu p\r\nstats detail on\r\ncache_memlimit 16\r\nstats settings\r\nmn\r\n"))
	for name, w := range map[string]string{"maxbytes": "16777216", "maxconns": "10", "item_size_max": "2097152",
		"auth_enabled_sasl": "yes", "auth_enabled_ascii": "yes", "detail_enabled": "yes",
		"read_buf_mem_limit": "5242880", "ssl_enabled": "no"} {
		if v[name] != w {
			t.Errorf("stats settings %s = %q, want %q", name, v[name], w)
		}
	}
}

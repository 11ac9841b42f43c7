package main

// End-to-end tests of the keyway binary with real clients: memccapable
// (libmemcached's conformance suite), gomemcache, crash and restart.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

func TestMemccapable(t *testing.T) {
	testenv.Need(t, "memccapable")
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"memory", nil},
		{"sync", []string{"--data-dir", t.TempDir(), "--durability", "sync"}},
	} {
		for _, proto := range []string{"-a", "-b"} {
			t.Run(mode.name+proto, func(t *testing.T) {
				kw := testenv.NewKeyway(t, mode.args...)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				out, err := exec.CommandContext(ctx, "memccapable", "-h", "127.0.0.1", "-p", strconv.Itoa(kw.Port), proto).CombinedOutput()
				if err != nil || !strings.Contains(string(out), "All tests passed") {
					t.Fatalf("memccapable %s: %v\n%s\nkeyway:\n%s", proto, err, out, kw.Output())
				}
			})
		}
	}
}

func TestGomemcache(t *testing.T) {
	kw := testenv.NewKeyway(t)
	mc := memcache.New(kw.Addr)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(mc.Set(&memcache.Item{Key: "a", Value: []byte("1"), Flags: 42}))
	it, err := mc.Get("a")
	must(err)
	if string(it.Value) != "1" || it.Flags != 42 {
		t.Fatalf("get a = %q flags %d", it.Value, it.Flags)
	}
	if err := mc.Add(&memcache.Item{Key: "a", Value: []byte("x")}); err != memcache.ErrNotStored {
		t.Fatalf("add existing: %v, want ErrNotStored", err)
	}
	n, err := mc.Increment("a", 41)
	must(err)
	if n != 42 {
		t.Fatalf("incr = %d, want 42", n)
	}
	n, err = mc.Decrement("a", 100)
	must(err)
	if n != 0 {
		t.Fatalf("decr below zero = %d, want 0", n)
	}
	must(mc.Set(&memcache.Item{Key: "big", Value: []byte("18446744073709551615")}))
	n, err = mc.Increment("big", 2)
	must(err)
	if n != 1 {
		t.Fatalf("incr wraps to %d, want 1", n)
	}
	// cas: a second writer with a stale cas id loses.
	must(mc.Set(&memcache.Item{Key: "c", Value: []byte("v1")}))
	c1, err := mc.Get("c")
	must(err)
	c2, err := mc.Get("c")
	must(err)
	c1.Value = []byte("v2")
	must(mc.CompareAndSwap(c1))
	c2.Value = []byte("v3")
	if err := mc.CompareAndSwap(c2); err != memcache.ErrCASConflict {
		t.Fatalf("stale cas: %v, want ErrCASConflict", err)
	}
	// multi-get
	for i := 0; i < 50; i++ {
		must(mc.Set(&memcache.Item{Key: fmt.Sprintf("k%d", i), Value: []byte(strconv.Itoa(i))}))
	}
	keys := []string{"nope"}
	for i := 0; i < 50; i++ {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	m, err := mc.GetMulti(keys)
	must(err)
	if len(m) != 50 || string(m["k7"].Value) != "7" {
		t.Fatalf("GetMulti: %d items, k7=%v", len(m), m["k7"])
	}
	// expiry
	must(mc.Set(&memcache.Item{Key: "e", Value: []byte("x"), Expiration: 1}))
	must(mc.Touch("c", 100))
	time.Sleep(2100 * time.Millisecond)
	if _, err := mc.Get("e"); err != memcache.ErrCacheMiss {
		t.Fatalf("expired get: %v, want miss", err)
	}
	must(mc.Delete("c"))
	if err := mc.Delete("c"); err != memcache.ErrCacheMiss {
		t.Fatalf("delete twice: %v", err)
	}
	must(mc.DeleteAll())
	if _, err := mc.Get("k1"); err != memcache.ErrCacheMiss {
		t.Fatalf("after flush_all: %v", err)
	}
}

// TestSyncSurvivesSIGKILL: with durability sync, every set acknowledged before
// a SIGKILL is readable, with its flags, after a restart on the same data dir.
func TestSyncSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	kw := testenv.NewKeyway(t, "--data-dir", dir, "--durability", "sync")
	var acked sync.Map // key -> value
	var count atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			mc := memcache.New(kw.Addr)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				val := strings.Repeat(key, 10)
				if err := mc.Set(&memcache.Item{Key: key, Value: []byte(val), Flags: uint32(i)}); err != nil {
					return // the server died under us: this one was not acknowledged
				}
				acked.Store(key, val)
				count.Add(1)
			}
		}(w)
	}
	for count.Load() < 2000 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := kw.Kill(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	kw2 := testenv.NewKeyway(t, "--data-dir", dir, "--durability", "sync")
	mc := memcache.New(kw2.Addr)
	checked := 0
	acked.Range(func(k, v any) bool {
		key := k.(string)
		it, err := mc.Get(key)
		if err != nil {
			t.Errorf("acknowledged %s lost after SIGKILL: %v", key, err)
			return false
		}
		i, _ := strconv.Atoi(key[strings.IndexByte(key, '-')+1:])
		if string(it.Value) != v.(string) || it.Flags != uint32(i) {
			t.Errorf("%s = %q flags %d after restart", key, it.Value, it.Flags)
			return false
		}
		checked++
		return true
	})
	t.Logf("%d acknowledged sets survived SIGKILL", checked)
}

// TestRestartKeepsChanges: a graceful restart with async durability keeps
// sets and loses deletes, expiries and flushed items, as memory had them.
func TestRestartKeepsChanges(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--data-dir", dir, "--durability", "async"}
	kw := testenv.NewKeyway(t, args...)
	mc := memcache.New(kw.Addr)
	for i := 0; i < 1000; i++ {
		if err := mc.Set(&memcache.Item{Key: fmt.Sprintf("k%d", i), Value: []byte(strconv.Itoa(i)), Flags: 7}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 1000; i += 2 {
		if err := mc.Delete(fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	mc.Set(&memcache.Item{Key: "short", Value: []byte("x"), Expiration: 1})
	mc.Append(&memcache.Item{Key: "k1", Value: []byte("+")})
	if err := kw.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	kw = testenv.NewKeyway(t, args...)
	mc = memcache.New(kw.Addr)
	for i := 0; i < 1000; i++ {
		it, err := mc.Get(fmt.Sprintf("k%d", i))
		switch {
		case i%2 == 0 && err != memcache.ErrCacheMiss:
			t.Fatalf("deleted k%d after restart: %v %v", i, it, err)
		case i%2 == 1 && err != nil:
			t.Fatalf("k%d lost after restart: %v", i, err)
		case i == 1 && string(it.Value) != "1+":
			t.Fatalf("k1 = %q, want 1+", it.Value)
		}
	}
	if _, err := mc.Get("short"); err != memcache.ErrCacheMiss {
		t.Fatalf("expired item after restart: %v", err)
	}
	if err := mc.DeleteAll(); err != nil {
		t.Fatal(err)
	}
	if err := kw.Stop(); err != nil {
		t.Fatal(err)
	}
	kw = testenv.NewKeyway(t, args...)
	if _, err := memcache.New(kw.Addr).Get("k1"); err != memcache.ErrCacheMiss {
		t.Fatalf("flushed item after restart: %v", err)
	}
}

// TestMemoryLimitBoundsRSS writes twice the -m limit in distinct keys and
// checks the process's anonymous memory (rssBytes) stays under 1.5 x the
// limit + 64 MiB, and evicted.
func TestMemoryLimitBoundsRSS(t *testing.T) {
	const limitMB = 64
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"memory", nil},
		{"async", []string{"--data-dir", t.TempDir(), "--durability", "async"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			kw := testenv.NewKeyway(t, append([]string{"-m", strconv.Itoa(limitMB)}, mode.args...)...)
			value := strings.Repeat("v", 400)
			const writers = 4
			total := 2 * limitMB << 20 / (len(value) + 20)
			var wg sync.WaitGroup
			var failed atomic.Value
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					nc, err := net.Dial("tcp", kw.Addr)
					if err != nil {
						failed.Store(err)
						return
					}
					defer nc.Close()
					bw := bufio.NewWriterSize(nc, 64<<10)
					br := bufio.NewReader(nc)
					for i := w; i < total; i += writers {
						fmt.Fprintf(bw, "set key-%09d 0 0 %d noreply\r\n%s\r\n", i, len(value), value)
					}
					bw.WriteString("mn\r\n")
					bw.Flush()
					line, err := br.ReadString('\n')
					if err != nil || line != "MN\r\n" {
						failed.Store(fmt.Errorf("after sets: %q %v", line, err))
					}
				}(w)
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				t.Fatal(err)
			}
			rss := rssBytes(t, kw.Cmd.Process.Pid)
			bound := int64(1.5*float64(limitMB<<20)) + 64<<20
			stats := statsOf(t, kw.Addr)
			t.Logf("wrote %d MiB of items into -m %d: anonymous RSS %d MiB (bound %d MiB), bytes %s, evictions %s",
				total*(len(value)+20)>>20, limitMB, rss>>20, bound>>20, stats["bytes"], stats["evictions"])
			if rss > bound {
				t.Fatalf("anonymous RSS %d MiB over bound %d MiB", rss>>20, bound>>20)
			}
			if b, _ := strconv.ParseInt(stats["bytes"], 10, 64); b > limitMB<<20 {
				t.Fatalf("store bytes %d over the limit", b)
			}
			if stats["evictions"] == "0" {
				t.Fatalf("no evictions after writing twice the limit")
			}
		})
	}
}

// rssBytes is the process's anonymous resident memory (RssAnon): what it allocated, which memory_limit governs. The
// resident pages of the binary itself (RssFile, about 32 MiB of keyway's text, the same whatever the load and
// droppable by the kernel) are left out.
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "RssAnon:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no RssAnon")
	return 0
}

func statsOf(t *testing.T, addr string) map[string]string {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fmt.Fprint(nc, "stats\r\n")
	br := bufio.NewReader(nc)
	m := map[string]string{}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "END\r\n" {
			return m
		}
		f := strings.Fields(line)
		if len(f) == 3 {
			m[f[1]] = f[2]
		}
	}
}

// TestStartupErrors: bad configuration and an unusable data dir stop startup
// with a message naming the problem.
func TestStartupErrors(t *testing.T) {
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "not-a-dir")
	os.WriteFile(file, []byte("x"), 0o600)
	conf := filepath.Join(t.TempDir(), "keyway.toml")
	os.WriteFile(conf, []byte("[memcache]\nmemory_limt = 64\n"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dir", file, "--durability", "sync"}, "data_dir"},
		{[]string{"--config", conf}, "memcache.memory_limt"},
		{[]string{"-m", "lots"}, "-m"},
		{[]string{"--durability", "sync"}, "data_dir"},
	} {
		out, err := exec.Command(bin, append([]string{"serve", "-p", "0"}, tc.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("keyway serve %v: err %v, output %q; want a failure naming %q", tc.args, err, out, tc.want)
		}
	}
}

// TestManyConnectionsAndBadClients: thousands of clients are served while
// others send garbage and lying lengths; past -c a client is told and closed.
func TestManyConnectionsAndBadClients(t *testing.T) {
	const clients = 2000
	kw := testenv.NewKeyway(t, "-c", strconv.Itoa(clients+10))
	if err := memcache.New(kw.Addr).Set(&memcache.Item{Key: "k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	// Bad clients first, kept open through the test.
	for _, garbage := range []string{
		"set other 0 0 1073741824\r\nxxxx",                 // lying length: swallowed, never buffered
		strings.Repeat("z", 10000),                         // a line that never ends: closed
		"\x80\x01\x00\x05\x00\x00\x00\x00\xff\xff\xff\xff", // binary header with a huge body
		"get " + strings.Repeat("k", 300) + "\r\n",         // key too long
	} {
		nc, err := net.Dial("tcp", kw.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write([]byte(garbage))
	}
	conns := make([]net.Conn, 0, clients)
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for i := 0; i < clients; i++ {
		nc, err := net.Dial("tcp", kw.Addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, nc)
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for _, nc := range conns {
		wg.Add(1)
		go func(nc net.Conn) {
			defer wg.Done()
			nc.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := nc.Write([]byte("get k\r\n")); err != nil {
				errs <- err
				return
			}
			want := "VALUE k 0 1\r\nv\r\nEND\r\n"
			got := make([]byte, len(want))
			if _, err := io.ReadFull(nc, got); err != nil || string(got) != want {
				errs <- fmt.Errorf("got %q, %v", got, err)
			}
		}(nc)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Fill up to the limit, then one more is refused with memcached's words.
	for len(conns) < clients+10 {
		nc, err := net.Dial("tcp", kw.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
	}
	time.Sleep(200 * time.Millisecond)
	nc, err := net.Dial("tcp", kw.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	line, _ := bufio.NewReader(nc).ReadString('\n')
	if line != "ERROR Too many open connections\r\n" {
		t.Fatalf("over the limit: %q", line)
	}
}

package memcache

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
)

// TestValueClasses guards valuePools' geometry: a value of largeValue bytes takes the first pool, one of
// maxPooledValue the last, and each pool's arrays hold every size it is asked for.
func TestValueClasses(t *testing.T) {
	if valueClass(largeValue) != 0 || valueClass(maxPooledValue) != valueClasses-1 {
		t.Fatalf("classes: %d for largeValue, %d for maxPooledValue, want 0 and %d", valueClass(largeValue), valueClass(maxPooledValue), valueClasses-1)
	}
	for n := largeValue; n <= maxPooledValue; n += 997 {
		if c := valueClass(n); largeValue<<c < n || c > 0 && largeValue<<(c-1) >= n {
			t.Fatalf("%d bytes in class %d (%d-byte arrays)", n, c, largeValue<<c)
		}
	}
}

// TestGetWhileEvicted: one client pipelines gets of large and small values while another stores enough to evict
// them again and again (a 4 MiB store: its shards' rings wrap under the readers). Every value a reply carries is
// whole and the key's own, however the ring moved before the reply was written, and each pooled array is taken
// back only after its reply went out.
func TestGetWhileEvicted(t *testing.T) {
	st, err := store.Open(store.Options{MemoryLimit: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	addr := serveTest(t, NewServer(engine.New(st, engine.Options{MaxItemSize: 1 << 20}), Options{MaxConnections: 64}))
	value := func(key string, n int) string { return strings.Repeat(key+"|", n/(len(key)+1)+1)[:n] }
	sizeOf := func(i int) int { return []int{100, largeValue + 5, 3 * largeValue, 60 << 10}[i%4] }
	const keys = 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := dialTest(t, addr)
		var b strings.Builder
		for round := range 30 {
			b.Reset()
			for i := range keys {
				k := fmt.Sprintf("key%d", i)
				v := value(k, sizeOf(i+round))
				fmt.Fprintf(&b, "set %s 0 0 %d noreply\r\n%s\r\n", k, len(v), v)
				f := fmt.Sprintf("filler%d-%d", round, i)
				fv := value(f, 40<<10)
				fmt.Fprintf(&b, "set %s 0 0 %d noreply\r\n%s\r\n", f, len(fv), fv)
			}
			b.WriteString("mn\r\n")
			w.send(b.String())
			w.expect("MN\r\n")
		}
	}()
	r := dialTest(t, addr)
	large := 0 // values past largeValue read back
	for round := 0; ; round++ {
		select {
		case <-done:
			if round == 0 || large == 0 || st.Stats().Evictions == 0 {
				t.Fatalf("%d rounds of reads, %d large values, %d evictions", round, large, st.Stats().Evictions)
			}
			return
		default:
		}
		var req strings.Builder
		for i := range keys {
			fmt.Fprintf(&req, "get key%d\r\nmg key%d v\r\n", i, (i+7)%keys)
		}
		req.WriteString("mn\r\n")
		r.send(req.String())
		r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			line, err := r.br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			var key string
			var n int
			switch {
			case line == "MN\r\n":
			case line == "END\r\n", line == "EN\r\n":
				continue
			case strings.HasPrefix(line, "VALUE "):
				var flags int
				if _, err := fmt.Sscanf(line, "VALUE %s %d %d\r\n", &key, &flags, &n); err != nil {
					t.Fatalf("%q: %v", line, err)
				}
			case strings.HasPrefix(line, "VA "):
				fmt.Sscanf(line, "VA %d\r\n", &n)
				key = "" // mg without k: the value names its key
			default:
				t.Fatalf("unexpected %q", line)
			}
			if line == "MN\r\n" {
				break
			}
			data := make([]byte, n+2)
			if _, err := readFull(r.br, data); err != nil {
				t.Fatal(err)
			}
			v := string(data[:n])
			k, _, _ := strings.Cut(v, "|")
			if key != "" && k != key || v != value(k, n) || string(data[n:]) != "\r\n" {
				t.Fatalf("a reply for %q carries %d bytes that are not its value: %.60q", key, n, v)
			}
			if n >= largeValue {
				large++
			}
		}
	}
}

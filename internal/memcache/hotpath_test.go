package memcache

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// TestCountersExactAcrossConnections runs pipelined gets and sets (some
// noreply) on four connections at once: each connection counts its own and
// publishes per batch, yet stats read after the replies equal the totals
// exactly, on another connection and on each connection itself.
func TestCountersExactAcrossConnections(t *testing.T) {
	addr := newTestServer(t)
	const conns, rounds, depth = 4, 20, 25
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialTest(t, addr)
			key := fmt.Sprintf("k%d", i)
			for range rounds {
				// Per round: depth sets (every other one noreply), depth
				// get hits, depth get misses and depth mg hits, then mn so
				// every reply is in.
				var req, want strings.Builder
				for j := range depth {
					if j%2 == 0 {
						fmt.Fprintf(&req, "set %s 0 0 2 noreply\r\nv%d\r\n", key, j%10)
					} else {
						fmt.Fprintf(&req, "set %s 0 0 2\r\nv%d\r\n", key, j%10)
						want.WriteString("STORED\r\n")
					}
				}
				for range depth {
					fmt.Fprintf(&req, "get %s\r\nget %s-missing\r\nmg %s v\r\n", key, key, key)
					fmt.Fprintf(&want, "VALUE %s 0 2\r\nv%d\r\nEND\r\nEND\r\nVA 2\r\nv%d\r\n", key, (depth-1)%10, (depth-1)%10)
				}
				req.WriteString("mn\r\n")
				want.WriteString("MN\r\n")
				c.send(req.String())
				c.expect(want.String())
			}
		}()
	}
	wg.Wait()
	const n = conns * rounds * depth
	want := map[string]int64{"cmd_set": n, "cmd_get": 3 * n, "get_hits": 2 * n, "get_misses": n}
	_, got, _ := readStats(t, dialTest(t, addr))
	for name, v := range want {
		if g := statInt(t, got, name); g != v {
			t.Errorf("stats on another connection: %s = %d, want %d", name, g, v)
		}
	}

	// A connection's own stats include the requests before it in the same
	// batch, whose counts are not published yet.
	c := dialTest(t, addr)
	c.send("set own 0 0 1 noreply\r\nx\r\nget own\r\nget nope\r\n")
	c.expect("VALUE own 0 1\r\nx\r\nEND\r\nEND\r\n")
	_, got, _ = readStats(t, c)
	want = map[string]int64{"cmd_set": n + 1, "cmd_get": 3*n + 2, "get_hits": 2*n + 1, "get_misses": n + 1}
	for name, v := range want {
		if g := statInt(t, got, name); g != v {
			t.Errorf("own stats: %s = %d, want %d", name, g, v)
		}
	}
}

// TestOwnStatsInSameBatch sends sets, gets and stats in one write: stats
// counts the requests before it though their replies are not written yet.
func TestOwnStatsInSameBatch(t *testing.T) {
	want := map[string]string{"cmd_set": "1", "cmd_get": "2", "get_hits": "1", "get_misses": "1"}
	t.Run("text", func(t *testing.T) {
		c := dialTest(t, newTestServer(t))
		c.send("set a 0 0 2 noreply\r\nxy\r\nget a\r\nget b\r\nstats\r\n")
		c.expect("VALUE a 0 2\r\nxy\r\nEND\r\nEND\r\n")
		_, stats, _ := readStatsReply(t, c)
		for name, v := range want {
			if stats[name] != v {
				t.Errorf("%s = %q, want %s", name, stats[name], v)
			}
		}
	})
	t.Run("binary", func(t *testing.T) {
		c := dialBinary(t, newBinaryTestServer(t))
		c.send(req(opSetQ, "a", "xy", setExtras(0, 0)...), req(opGetQ, "a", ""), req(opGetQ, "b", ""), req(opStat, "", ""))
		expect(t, c.recv(), opGetQ, statusOK, "xy")
		stats := map[string]string{}
		for {
			r := c.recv()
			if len(r.key) == 0 {
				break
			}
			stats[string(r.key)] = string(r.value)
		}
		for name, v := range want {
			if stats[name] != v {
				t.Errorf("%s = %q, want %s", name, stats[name], v)
			}
		}
	})
}

// TestLargeValuesPipelined gets values below, at and above largeValue (sent
// from the item, not copied) in pipelined batches with noreply sets
// interleaved and several values per get line: every reply holds the exact
// bytes, in order, whatever a later set in the batch stores.
func TestLargeValuesPipelined(t *testing.T) {
	c := dialTest(t, newTestServer(t))
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, largeValue - 1, largeValue, largeValue + 1, 3 * largeValue, flushThreshold + 7, 1<<20 - 100}
	value := func(n int) []byte {
		v := make([]byte, n)
		for i := range v {
			v[i] = "ab\r\n \x00z"[rng.IntN(7)]
		}
		return v
	}
	current := map[string][]byte{}
	for round := range 6 {
		var req, want bytes.Buffer
		for i := range 12 {
			key := fmt.Sprintf("k%d", i%5)
			v := value(sizes[rng.IntN(len(sizes))])
			switch rng.IntN(4) {
			case 0:
				fmt.Fprintf(&req, "set %s 0 0 %d noreply\r\n%s\r\n", key, len(v), v)
				current[key] = v
			case 1:
				fmt.Fprintf(&req, "set %s 0 0 %d\r\n%s\r\n", key, len(v), v)
				want.WriteString("STORED\r\n")
				current[key] = v
			case 2:
				// A multi-key get line naming the key twice and others.
				fmt.Fprintf(&req, "get %s k0 %s k3\r\n", key, key)
				for _, k := range []string{key, "k0", key, "k3"} {
					if cur, ok := current[k]; ok {
						fmt.Fprintf(&want, "VALUE %s 0 %d\r\n%s\r\n", k, len(cur), cur)
					}
				}
				want.WriteString("END\r\n")
			default:
				fmt.Fprintf(&req, "mg %s v\r\n", key)
				if cur, ok := current[key]; ok {
					fmt.Fprintf(&want, "VA %d\r\n%s\r\n", len(cur), cur)
				} else {
					want.WriteString("EN\r\n")
				}
			}
		}
		c.send(req.String())
		got := make([]byte, want.Len())
		if n, err := readFull(c.br, got); err != nil {
			t.Fatalf("round %d: read %d of %d bytes: %v", round, n, want.Len(), err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			i := 0
			for i < len(got) && got[i] == want.Bytes()[i] {
				i++
			}
			t.Fatalf("round %d: replies differ at byte %d of %d: got %q, want %q", round, i, len(got),
				got[i:min(i+40, len(got))], want.Bytes()[i:min(i+40, want.Len())])
		}
	}
}

// TestLargeValuesPipelinedBinary pipelines quiet binary sets and gets of
// values around largeValue: each reply carries the exact bytes.
func TestLargeValuesPipelinedBinary(t *testing.T) {
	c := dialBinary(t, newBinaryTestServer(t))
	var vals []string
	var reqs []binReq
	for i, n := range []int{largeValue - 1, largeValue, 2*largeValue + 3, 5} {
		v := []byte(strings.Repeat(string(rune('a'+i)), n))
		v[0], v[n-1] = '<', '>'
		vals = append(vals, string(v))
		reqs = append(reqs, req(opSetQ, fmt.Sprint("b", i), string(v), setExtras(0, 0)...))
	}
	for range 3 {
		for i := range vals {
			reqs = append(reqs, req(opGetKQ, fmt.Sprint("b", i), ""))
		}
	}
	c.send(append(reqs, req(opNoop, "", ""))...)
	for range 3 {
		for i, v := range vals {
			r := c.recv()
			if r.op != opGetKQ || r.status != statusOK || string(r.key) != fmt.Sprint("b", i) || string(r.value) != v {
				t.Fatalf("reply op %#x status %#x key %q with %d bytes, want key b%d with its %d bytes",
					r.op, r.status, r.key, len(r.value), i, len(v))
			}
		}
	}
	expect(t, c.recv(), opNoop, statusOK, "")
}

package memcache

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
)

// benchRequests sends batches of depth requests (req, repeated) over one loopback connection and reads the replies,
// each exactly reply bytes, so allocs/op is the server's cost per request (the client reuses its buffers).
func benchRequests(b *testing.B, setup, req string, replyLen, depth int) {
	addr := newTestServer(b)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	if setup != "" {
		// setup is sets, each answered STORED.
		nc.Write([]byte(setup))
		buf := make([]byte, len("STORED\r\n")*strings.Count(setup, "set "))
		if _, err := io.ReadFull(nc, buf); err != nil {
			b.Fatal(err)
		}
	}
	batch := bytes.Repeat([]byte(req), depth)
	replies := make([]byte, replyLen*depth)
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	n := 0
	for b.Loop() {
		if n%depth == 0 {
			if _, err := nc.Write(batch); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(nc, replies); err != nil {
				b.Fatal(err)
			}
		}
		n++
	}
}

const benchValue = "forty bytes of value, give or take a few"

func BenchmarkTextGet(b *testing.B) {
	reply := "VALUE bench-key 0 40\r\n" + benchValue + "\r\nEND\r\n"
	for _, depth := range []int{1, 100} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			benchRequests(b, "set bench-key 0 0 40\r\n"+benchValue+"\r\n", "get bench-key\r\n", len(reply), depth)
		})
	}
}

func BenchmarkTextSet(b *testing.B) {
	for _, depth := range []int{1, 100} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			benchRequests(b, "", "set bench-key 0 0 40\r\n"+benchValue+"\r\n", len("STORED\r\n"), depth)
		})
	}
}

func BenchmarkMetaGet(b *testing.B) {
	reply := "VA 40 f0\r\n" + benchValue + "\r\n"
	for _, depth := range []int{1, 100} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			benchRequests(b, "set bench-key 0 0 40\r\n"+benchValue+"\r\n", "mg bench-key v f\r\n", len(reply), depth)
		})
	}
}

// BenchmarkTextGetLarge gets values around largeValue, the size from which a
// value is sent from the item instead of copied into the reply buffer.
func BenchmarkTextGetLarge(b *testing.B) {
	for _, size := range []int{1 << 10, 4 << 10, 8 << 10, 16 << 10, 64 << 10} {
		value := strings.Repeat("v", size)
		reply := fmt.Sprintf("VALUE bench-key 0 %d\r\n%s\r\nEND\r\n", size, value)
		for _, depth := range []int{1, 10} {
			b.Run(fmt.Sprintf("size=%d/depth=%d", size, depth), func(b *testing.B) {
				benchRequests(b, fmt.Sprintf("set bench-key 0 0 %d\r\n%s\r\n", size, value), "get bench-key\r\n", len(reply), depth)
			})
		}
	}
}

// BenchmarkTextMultiGet gets ten keys per request, pipelined.
func BenchmarkTextMultiGet(b *testing.B) {
	var setup, req, reply strings.Builder
	req.WriteString("get")
	for i := range 10 {
		fmt.Fprintf(&setup, "set bench-key-%d 0 0 40\r\n%s\r\n", i, benchValue)
		fmt.Fprintf(&req, " bench-key-%d", i)
		fmt.Fprintf(&reply, "VALUE bench-key-%d 0 40\r\n%s\r\n", i, benchValue)
	}
	req.WriteString("\r\n")
	reply.WriteString("END\r\n")
	for _, depth := range []int{1, 10} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			benchRequests(b, setup.String(), req.String(), reply.Len(), depth)
		})
	}
}

// BenchmarkTextGetParallel runs gets and sets (9:1, as memcaslap's default mix) on 8 connections at once, each
// with its own key, depth requests per batch: the cost of what connections share (counters, the store's shards).
func BenchmarkTextGetParallel(b *testing.B) {
	for _, depth := range []int{1, 10} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			addr := newTestServer(b)
			var id atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(4) // 8 connections on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				defer nc.Close()
				key := fmt.Sprintf("bench-key-%d", id.Add(1))
				var batch, want bytes.Buffer
				for i := range depth * 10 {
					if i%10 == 0 {
						fmt.Fprintf(&batch, "set %s 0 0 40\r\n%s\r\n", key, benchValue)
						want.WriteString("STORED\r\n")
					} else {
						fmt.Fprintf(&batch, "get %s\r\n", key)
						fmt.Fprintf(&want, "VALUE %s 0 40\r\n%s\r\nEND\r\n", key, benchValue)
					}
				}
				replies := make([]byte, want.Len())
				n := 0
				for pb.Next() {
					if n%(depth*10) == 0 {
						if _, err := nc.Write(batch.Bytes()); err != nil {
							b.Error(err)
							return
						}
						if _, err := io.ReadFull(nc, replies); err != nil {
							b.Error(err)
							return
						}
					}
					n++
				}
			})
		})
	}
}

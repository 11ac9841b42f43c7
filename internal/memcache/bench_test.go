package memcache

import (
	"bytes"
	"fmt"
	"io"
	"net"
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
		nc.Write([]byte(setup))
		buf := make([]byte, 64)
		if _, err := nc.Read(buf); err != nil {
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

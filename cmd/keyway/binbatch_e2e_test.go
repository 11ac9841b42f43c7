package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// TestBinaryGetRunIsOneQuery: a php-memcached/libmemcached style getMulti on
// the binary protocol (getkq × 50, then noop) on a db_only container is one
// `WHERE key IN (…)` on MariaDB, not 50 queries, and answers exactly what 50
// lone getkq would: the 30 rows that exist, each with its own opaque, in
// order, then the noop.
func TestBinaryGetRunIsOneQuery(t *testing.T) {
	kw, db := startContainers(t, "caching") // the default container (test.kv) is db_only
	for i := range 30 {
		if _, err := db.Exec("INSERT INTO test.kv VALUES (?, ?)", fmt.Sprint("k", i), fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	comSelect := func() int {
		var name string
		var n int
		if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_select'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	nc, err := net.DialTimeout("tcp", kw.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	var req []byte
	for i := range 50 {
		r := binGetKQ(fmt.Sprint("k", i))
		binary.BigEndian.PutUint32(r[12:], uint32(1000+i)) // opaque
		req = append(req, r...)
	}
	noop := make([]byte, 24)
	noop[0], noop[1] = 0x80, 0x0a
	binary.BigEndian.PutUint32(noop[12:], 4242)
	req = append(req, noop...)

	before := comSelect()
	if _, err := nc.Write(req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	for i := 0; ; i++ {
		var hdr [24]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[8:]))
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
		op, opaque, status := hdr[1], binary.BigEndian.Uint32(hdr[12:]), binary.BigEndian.Uint16(hdr[6:])
		if op == 0x0a {
			if opaque != 4242 || i != 30 {
				t.Fatalf("noop after %d replies (opaque %d), want after 30", i, opaque)
			}
			break
		}
		keylen, extlen := int(binary.BigEndian.Uint16(hdr[2:])), int(hdr[4])
		key, value := string(body[extlen:extlen+keylen]), string(body[extlen+keylen:])
		if op != 0x0d || status != 0 || opaque != uint32(1000+i) || key != "k"+strconv.Itoa(i) || value != "v"+strconv.Itoa(i) {
			t.Fatalf("reply %d: op %#x status %d opaque %d key %q value %q", i, op, status, opaque, key, value)
		}
	}
	if n := comSelect() - before; n != 1 {
		t.Fatalf("a run of 50 getkq took %d SELECTs on MariaDB, want 1", n)
	}
}

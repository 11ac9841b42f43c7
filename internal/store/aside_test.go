package store

import (
	"bytes"
	"errors"
	"testing"
)

// Aside blobs survive a reopen whole (across chunks), are replaced whole, are never loaded as items, and a
// flush_all leaves them alone.
func TestAsideBlobs(t *testing.T) {
	dir := t.TempDir()
	open := func() *Store {
		s, err := Open(Options{MemoryLimit: 8 << 20, DataDir: dir, Durability: DurabilitySync})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	if b, err := s.Aside("snap"); err != nil || b != nil {
		t.Fatalf("no blob yet: got %d bytes, %v", len(b), err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (asideChunk*5/2)/16) // three chunks
	if err := s.PutAside("snap", big); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAside("other", []byte{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update([]byte("k"), func(*Item) (Action, Item) { return Replace, Item{Value: []byte("v")} }); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushAll(); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open()
	if n := s.Stats().CurrItems; n != 0 {
		t.Fatalf("%d items after reopen: aside records were loaded as items, or the flush was lost", n)
	}
	if b, err := s.Aside("snap"); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("blob after reopen: %d bytes (want %d), %v", len(b), len(big), err)
	}
	if b, err := s.Aside("other"); err != nil || b == nil || len(b) != 0 {
		t.Fatalf("empty blob after reopen: %v, %v", b, err)
	}
	if err := s.PutAside("snap", []byte("short")); err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Aside("snap"); string(b) != "short" {
		t.Fatalf("replaced blob = %d bytes, want the new 5: old chunks survived", len(b))
	}
	if err := s.DeleteAside("snap"); err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Aside("snap"); b != nil {
		t.Fatalf("deleted blob still there: %q", b)
	}
	s.Close()

	mem, _ := Open(Options{MemoryLimit: 1 << 20})
	if err := mem.PutAside("snap", nil); !errors.Is(err, ErrNoDisk) {
		t.Fatalf("PutAside without a data_dir: %v, want ErrNoDisk", err)
	}
}

package store

// Aside records: named blobs kept in the store's Pebble beside the items, for state that belongs with the data
// but is not items (the caches' warm-restart snapshot, package warm). They are not items: never loaded into
// memory, counted or flushed. A blob is split into chunks under asidePrefix + name + 0 + chunk number, and is
// replaced or deleted whole in one synced Pebble batch, so a crash leaves the old blob or the new one.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"
)

// asidePrefix is the disk-key prefix of aside records: above every shard index, below the journal's.
const asidePrefix = 0xfd

// asideChunk bounds one Pebble value of a blob.
const asideChunk = 1 << 20

// ErrNoDisk means the store keeps nothing on disk (no data_dir, or durability "none").
var ErrNoDisk = errors.New("store: no data_dir")

func asideBounds(name string) (lo, hi []byte) {
	lo = append(append([]byte{asidePrefix}, name...), 0)
	hi = append(append([]byte{asidePrefix}, name...), 1)
	return lo, hi
}

// PutAside replaces the blob name with data (synced before it returns).
func (s *Store) PutAside(name string, data []byte) error {
	if s.disk == nil {
		return ErrNoDisk
	}
	if err := s.disk.failure(); err != nil {
		return err
	}
	lo, hi := asideBounds(name)
	b := s.disk.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return err
	}
	for i := 0; i == 0 || len(data) > 0; i++ {
		n := min(len(data), asideChunk)
		if err := b.Set(binary.BigEndian.AppendUint32(append([]byte(nil), lo...), uint32(i)), data[:n], nil); err != nil {
			return err
		}
		data = data[n:]
	}
	if err := s.disk.commitSafely(b, true); err != nil {
		return fmt.Errorf("store: writing %s to data_dir %q: %w", name, s.disk.dir, err)
	}
	return nil
}

// Aside returns the blob name, or nil when there is none.
func (s *Store) Aside(name string) ([]byte, error) {
	if s.disk == nil {
		return nil, ErrNoDisk
	}
	lo, hi := asideBounds(name)
	it, err := s.disk.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	var out []byte
	found := false
	for it.First(); it.Valid(); it.Next() {
		out = append(out, it.Value()...)
		found = true
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("store: reading %s from data_dir %q: %w", name, s.disk.dir, err)
	}
	if !found {
		return nil, nil
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

// DeleteAside deletes the blob name (synced before it returns).
func (s *Store) DeleteAside(name string) error {
	if s.disk == nil {
		return ErrNoDisk
	}
	lo, hi := asideBounds(name)
	b := s.disk.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(lo, hi, nil); err != nil {
		return err
	}
	return s.disk.commitSafely(b, true)
}

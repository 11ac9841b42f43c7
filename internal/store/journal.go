package store

// The journal: small records other packages keep under the store's
// durability, apart from the items. The write-behind queue of async
// containers journals each write it acknowledges and removes the record once
// the table has the write, so a restart finds what was acknowledged and not
// yet written.
//
// Journal records are not items: they are not in memory (only on disk), not
// charged against the limit, never evicted or expired, and flush_all leaves
// them alone. They ride the same pending logs and group commit as items, so a
// JournalPut is as durable as a set when it returns (sync waits for the disk,
// async within FlushInterval), and a key's records reach the disk in order;
// a record still in memory when a later one of its key makes it moot never
// reaches it (see journalAppend): with async durability most write-behind
// rows are put and removed between two commit rounds, and cost the disk
// nothing (see docs/benchmarks.md).
//
// Disk key: journalPrefix + key; the value is encoded as an item with no flags.

import "strings"

// journalPrefix is the disk-key prefix of journal records: above every shard
// number and below the format key.
const journalPrefix = 0xfe

// JournalPut appends value under key and returns a function that waits until
// the record is as durable as the store's durability promises (a set would
// wait as long). Records of one key reach the disk in the order of the calls
// that appended them, so a caller that orders its calls (under its own lock)
// and waits outside that lock keeps its order without holding the lock across
// a disk sync. Without persistence it does nothing.
func (s *Store) JournalPut(key string, value []byte) (wait func() error) {
	return s.journal(record{op: opPut, shard: journalPrefix, key: key, value: value})
}

// JournalDelete appends the removal of key's record, like JournalPut, but its
// wait always waits until the removal is on disk, whatever the store's
// durability: a removal lost in a crash would let the record's write be
// replayed over whatever the table received after it (back in time), so the
// write-behind queue counts a row as written only once this returns. When the
// disk holds no record of key (its put never left memory: see journalAppend)
// there is nothing to remove there, and the wait returns at once.
func (s *Store) JournalDelete(key string) (wait func() error) {
	seq := s.journalAppend(record{op: opDelete, shard: journalPrefix, key: key})
	return func() error {
		if seq == 0 {
			return nil
		}
		return s.disk.waitSynced(seq)
	}
}

func (s *Store) journal(rec record) func() error {
	seq := s.journalAppend(rec)
	if seq != 0 && s.disk.durability != DurabilitySync {
		return s.disk.waitAny // the same wait for every record: one func, not one each
	}
	return func() error { return s.waitDurable(seq) }
}

// journalAppend appends rec to its shard's pending log and returns its
// sequence number, 0 without persistence or when nothing needs appending.
//
// A record the disk has not received yet can still be taken back, and is when
// a later one makes it moot: a put of a key whose earlier put is pending
// makes that one nothing, and a removal of a key whose put is pending makes
// the put nothing and is itself appended only if the disk holds a record of
// the key (its last record handed to the disk was a put, or the store loaded
// one). So a write-behind row settled before the store's next commit round,
// the usual case with async durability, costs the disk nothing; what reaches
// the disk for a key is still its records in order, less puts overtaken
// before they left memory, and a crash at any point leaves either what it
// left before or the key's latest record.
func (s *Store) journalAppend(rec record) uint64 {
	if s.disk == nil {
		return 0
	}
	_, sh := s.shardFor([]byte(rec.key))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.mu.journalPending[rec.key]; ok {
		s.disk.cancelLocked(sh, i)
		delete(sh.mu.journalPending, rec.key)
		if _, onDisk := sh.mu.journalOnDisk[rec.key]; rec.op == opDelete && !onDisk {
			return 0
		}
	}
	seq := s.disk.appendLocked(sh, rec)
	if rec.op == opPut {
		sh.mu.journalPending[rec.key] = len(sh.mu.pending) - 1
	}
	return seq
}

// TakeJournal returns the records whose keys start with prefix as the disk
// held them when the store opened, and forgets them (the disk keeps them until
// JournalDelete). Call it before anything journals under prefix.
func (s *Store) TakeJournal(prefix string) map[string][]byte {
	s.journalMu.Lock()
	defer s.journalMu.Unlock()
	out := map[string][]byte{}
	for k, v := range s.loadedJournal {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
			delete(s.loadedJournal, k)
		}
	}
	return out
}

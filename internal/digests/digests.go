// Package digests keeps the SQL door's per-digest query statistics: one row per normalized statement, schema and
// user, with counts, rows, errors and latencies (the equivalent of ProxySQL's stats_mysql_query_digest), read by
// /digests and the dashboard.
//
// Invariants:
//   - Recording is cheap and never blocks on I/O: Table.Record takes one of several sharded mutexes for a few
//     field updates.
//   - Memory is bounded: a Table holds at most its capacity of distinct keys plus one overflow row.
package digests

import (
	"encoding/json"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Key identifies one row of digest statistics: a normalized statement as run by one user in one schema.
//
// The row is found by (Fingerprint, Schema, User): a fingerprint is the SQL door's 64-bit hash of the statement
// with its literals erased, one integer to hash and compare per query instead of the whole normalized text.
// Digest, Normalized and Class describe the statement and are kept from the first Record of the row; they must
// not vary for one fingerprint. A zero Fingerprint stands for a hash of Digest.
type Key struct {
	Fingerprint                             uint64
	Digest, Normalized, Class, Schema, User string
}

// rowKey is what the table is keyed by (see Key).
type rowKey struct {
	fp           uint64
	schema, user string
}

// Overflow is the Digest of the single row that collects every key arriving after the table is full.
// Its Normalized text says so; Class, Schema and User are empty.
const Overflow = "other"

// Row is one row of the digest table. In JSON the latencies are integer microseconds (min_us, avg_us,
// max_us, sum_us) and the times RFC 3339.
type Row struct {
	Digest, Normalized, Class, Schema, User string
	Count, Rows, Errors                     int64
	MinLatency, AvgLatency, MaxLatency      time.Duration
	SumLatency                              time.Duration // total time: the sort key
	FirstSeen, LastSeen                     time.Time
}

type digestJSON struct {
	Digest     string    `json:"digest"`
	Normalized string    `json:"digest_text"`
	Class      string    `json:"class"`
	Schema     string    `json:"schema"`
	User       string    `json:"user"`
	Count      int64     `json:"count_star"`
	Rows       int64     `json:"rows"`
	Errors     int64     `json:"errors"`
	MinUS      int64     `json:"min_us"`
	AvgUS      int64     `json:"avg_us"`
	MaxUS      int64     `json:"max_us"`
	SumUS      int64     `json:"sum_us"`
	FirstSeen  time.Time `json:"first_seen"`
	LastSeen   time.Time `json:"last_seen"`
}

// MarshalJSON encodes latencies as microseconds.
func (s Row) MarshalJSON() ([]byte, error) {
	return json.Marshal(digestJSON{
		Digest: s.Digest, Normalized: s.Normalized, Class: s.Class, Schema: s.Schema, User: s.User,
		Count: s.Count, Rows: s.Rows, Errors: s.Errors,
		MinUS: s.MinLatency.Microseconds(), AvgUS: s.AvgLatency.Microseconds(),
		MaxUS: s.MaxLatency.Microseconds(), SumUS: s.SumLatency.Microseconds(),
		FirstSeen: s.FirstSeen, LastSeen: s.LastSeen,
	})
}

// UnmarshalJSON is the inverse of MarshalJSON (latencies come back at microsecond precision).
func (s *Row) UnmarshalJSON(b []byte) error {
	var j digestJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Row{
		Digest: j.Digest, Normalized: j.Normalized, Class: j.Class, Schema: j.Schema, User: j.User,
		Count: j.Count, Rows: j.Rows, Errors: j.Errors,
		MinLatency: time.Duration(j.MinUS) * time.Microsecond, AvgLatency: time.Duration(j.AvgUS) * time.Microsecond,
		MaxLatency: time.Duration(j.MaxUS) * time.Microsecond, SumLatency: time.Duration(j.SumUS) * time.Microsecond,
		FirstSeen: j.FirstSeen, LastSeen: j.LastSeen,
	}
	return nil
}

const digestShards = 32

// Table aggregates query statistics per Key. Safe for concurrent use.
//
// The table holds at most capacity keys. When it is full, a new key is not added: its query is counted in one
// overflow row (Digest "other") until Reset makes room. Existing keys keep being updated.
type Table struct {
	seed     maphash.Seed
	capacity int64
	n        atomic.Int64 // keys in the shards, excluding the overflow row
	shards   [digestShards]digestShard
	overflow digestShard // holds at most the one overflow row
}

type digestShard struct {
	mu sync.Mutex
	m  map[rowKey]*digestRow
	_  [48]byte // keep neighbouring shards' locks off one cache line
}

type digestRow struct {
	key                 Key // as first recorded
	count, rows, errors int64
	sum, min, max       time.Duration
	first, last         time.Time
}

// New returns a table bounded to capacity distinct keys (at least 1).
func New(capacity int) *Table {
	if capacity < 1 {
		capacity = 1
	}
	d := &Table{seed: maphash.MakeSeed(), capacity: int64(capacity)}
	for i := range d.shards {
		d.shards[i].m = make(map[rowKey]*digestRow)
	}
	d.overflow.m = make(map[rowKey]*digestRow, 1)
	return d
}

var overflowKey = Key{Digest: Overflow, Normalized: "(other digests: the digest table was full)"}

// Record counts one execution of k that returned (or affected) rows rows, took latency, and failed or not.
func (d *Table) Record(k Key, rows int64, latency time.Duration, failed bool) {
	now := time.Now()
	fp := k.Fingerprint
	if fp == 0 {
		fp = maphash.String(d.seed, k.Digest)
	}
	rk := rowKey{fp, k.Schema, k.User}
	sh := &d.shards[fp%digestShards]
	sh.mu.Lock()
	r := sh.m[rk]
	if r == nil {
		// Reserve a slot first so concurrent inserts in other shards cannot overshoot the capacity.
		if d.n.Add(1) > d.capacity {
			d.n.Add(-1)
			sh.mu.Unlock()
			d.overflow.mu.Lock()
			r = d.overflow.m[rowKey{}]
			if r == nil {
				r = &digestRow{key: overflowKey, first: now, min: latency}
				d.overflow.m[rowKey{}] = r
			}
			r.add(rows, latency, failed, now)
			d.overflow.mu.Unlock()
			return
		}
		r = &digestRow{key: k, first: now, min: latency}
		sh.m[rk] = r
	}
	r.add(rows, latency, failed, now)
	sh.mu.Unlock()
}

func (r *digestRow) add(rows int64, latency time.Duration, failed bool, now time.Time) {
	r.count++
	r.rows += rows
	if failed {
		r.errors++
	}
	r.sum += latency
	if latency < r.min {
		r.min = latency
	}
	if latency > r.max {
		r.max = latency
	}
	r.last = now
}

// Snapshot returns a copy of every row, sorted by total time, highest first (ties: more executions first).
func (d *Table) Snapshot() []Row {
	out := make([]Row, 0, d.n.Load()+1)
	for i := range d.shards {
		out = d.shards[i].appendTo(out, false)
	}
	out = d.overflow.appendTo(out, false)
	sortDigests(out)
	return out
}

// SnapshotAndReset returns what Snapshot would and empties the table, shard by shard, so that no execution is
// counted in both the returned rows and the new table, and none is lost.
func (d *Table) SnapshotAndReset() []Row {
	var out []Row
	for i := range d.shards {
		before := len(out)
		out = d.shards[i].appendTo(out, true)
		d.n.Add(-int64(len(out) - before))
	}
	out = d.overflow.appendTo(out, true)
	sortDigests(out)
	return out
}

// Reset empties the table.
func (d *Table) Reset() { d.SnapshotAndReset() }

// Len returns the number of rows, the overflow row included.
func (d *Table) Len() int {
	n := int(d.n.Load())
	d.overflow.mu.Lock()
	n += len(d.overflow.m)
	d.overflow.mu.Unlock()
	return n
}

func (sh *digestShard) appendTo(out []Row, reset bool) []Row {
	sh.mu.Lock()
	for _, r := range sh.m {
		k := &r.key
		s := Row{
			Digest: k.Digest, Normalized: k.Normalized, Class: k.Class, Schema: k.Schema, User: k.User,
			Count: r.count, Rows: r.rows, Errors: r.errors,
			MinLatency: r.min, MaxLatency: r.max, SumLatency: r.sum,
			FirstSeen: r.first, LastSeen: r.last,
		}
		if r.count > 0 {
			s.AvgLatency = r.sum / time.Duration(r.count)
		}
		out = append(out, s)
	}
	if reset {
		clear(sh.m)
	}
	sh.mu.Unlock()
	return out
}

func sortDigests(s []Row) {
	slices.SortFunc(s, func(a, b Row) int {
		switch {
		case a.SumLatency != b.SumLatency:
			if a.SumLatency > b.SumLatency {
				return -1
			}
			return 1
		case a.Count != b.Count:
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Digest+a.Schema+a.User, b.Digest+b.Schema+b.User)
	})
}

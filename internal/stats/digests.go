// Package stats holds keyway's runtime statistics: per-digest query statistics for the SQL door (the equivalent of
// ProxySQL's stats_mysql_query_digest) and the Prometheus metrics every part of the server reports into.
//
// Invariants:
//   - Recording is cheap and never blocks on I/O: Digests.Record takes one of several sharded mutexes for a few
//     field updates; Metrics.ObserveQuery touches pre-resolved Prometheus children for the known classes.
//   - Memory is bounded: Digests holds at most its capacity of distinct keys plus one overflow row.
//   - Nothing here registers with Prometheus's global registry; each Metrics owns its registry, so tests and
//     several servers in one process do not collide.
//   - Collection callbacks (pool and memcache stats) run at scrape time only, on the scraping goroutine.
package stats

import (
	"encoding/json"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DigestKey identifies one row of digest statistics: a normalized statement as run by one user in one schema.
//
// The row is found by (Fingerprint, Schema, User): a fingerprint is the SQL door's 64-bit hash of the statement
// with its literals erased, one integer to hash and compare per query instead of the whole normalized text.
// Digest, Normalized and Class describe the statement and are kept from the first Record of the row; they must
// not vary for one fingerprint. A zero Fingerprint stands for a hash of Digest.
type DigestKey struct {
	Fingerprint                             uint64
	Digest, Normalized, Class, Schema, User string
}

// rowKey is what the table is keyed by (see DigestKey).
type rowKey struct {
	fp           uint64
	schema, user string
}

// OverflowDigest is the Digest of the single row that collects every key arriving after the table is full.
// Its Normalized text says so; Class, Schema and User are empty.
const OverflowDigest = "other"

// DigestStats is one row of the digest table. In JSON the latencies are integer microseconds (min_us, avg_us,
// max_us, sum_us) and the times RFC 3339.
type DigestStats struct {
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
func (s DigestStats) MarshalJSON() ([]byte, error) {
	return json.Marshal(digestJSON{
		Digest: s.Digest, Normalized: s.Normalized, Class: s.Class, Schema: s.Schema, User: s.User,
		Count: s.Count, Rows: s.Rows, Errors: s.Errors,
		MinUS: s.MinLatency.Microseconds(), AvgUS: s.AvgLatency.Microseconds(),
		MaxUS: s.MaxLatency.Microseconds(), SumUS: s.SumLatency.Microseconds(),
		FirstSeen: s.FirstSeen, LastSeen: s.LastSeen,
	})
}

// UnmarshalJSON is the inverse of MarshalJSON (latencies come back at microsecond precision).
func (s *DigestStats) UnmarshalJSON(b []byte) error {
	var j digestJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = DigestStats{
		Digest: j.Digest, Normalized: j.Normalized, Class: j.Class, Schema: j.Schema, User: j.User,
		Count: j.Count, Rows: j.Rows, Errors: j.Errors,
		MinLatency: time.Duration(j.MinUS) * time.Microsecond, AvgLatency: time.Duration(j.AvgUS) * time.Microsecond,
		MaxLatency: time.Duration(j.MaxUS) * time.Microsecond, SumLatency: time.Duration(j.SumUS) * time.Microsecond,
		FirstSeen: j.FirstSeen, LastSeen: j.LastSeen,
	}
	return nil
}

const digestShards = 32

// Digests aggregates query statistics per DigestKey. Safe for concurrent use.
//
// The table holds at most capacity keys. When it is full, a new key is not added: its query is counted in one
// overflow row (Digest "other") until Reset makes room. Existing keys keep being updated.
type Digests struct {
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
	key                 DigestKey // as first recorded
	count, rows, errors int64
	sum, min, max       time.Duration
	first, last         time.Time
}

// NewDigests returns a table bounded to capacity distinct keys (at least 1).
func NewDigests(capacity int) *Digests {
	if capacity < 1 {
		capacity = 1
	}
	d := &Digests{seed: maphash.MakeSeed(), capacity: int64(capacity)}
	for i := range d.shards {
		d.shards[i].m = make(map[rowKey]*digestRow)
	}
	d.overflow.m = make(map[rowKey]*digestRow, 1)
	return d
}

var overflowKey = DigestKey{Digest: OverflowDigest, Normalized: "(other digests: the digest table was full)"}

// Record counts one execution of k that returned (or affected) rows rows, took latency, and failed or not.
func (d *Digests) Record(k DigestKey, rows int64, latency time.Duration, failed bool) {
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
func (d *Digests) Snapshot() []DigestStats {
	out := make([]DigestStats, 0, d.n.Load()+1)
	for i := range d.shards {
		out = d.shards[i].appendTo(out, false)
	}
	out = d.overflow.appendTo(out, false)
	sortDigests(out)
	return out
}

// SnapshotAndReset returns what Snapshot would and empties the table, shard by shard, so that no execution is
// counted in both the returned rows and the new table, and none is lost.
func (d *Digests) SnapshotAndReset() []DigestStats {
	var out []DigestStats
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
func (d *Digests) Reset() { d.SnapshotAndReset() }

// Len returns the number of rows, the overflow row included.
func (d *Digests) Len() int {
	n := int(d.n.Load())
	d.overflow.mu.Lock()
	n += len(d.overflow.m)
	d.overflow.mu.Unlock()
	return n
}

func (sh *digestShard) appendTo(out []DigestStats, reset bool) []DigestStats {
	sh.mu.Lock()
	for _, r := range sh.m {
		k := &r.key
		s := DigestStats{
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

func sortDigests(s []DigestStats) {
	slices.SortFunc(s, func(a, b DigestStats) int {
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

// Package warm keeps keyway's caches across a restart (seed 002: no cold cache and no stampede after a restart):
// at a clean stop it saves the copies that are valid then, the caching containers' rows and the SQL result
// cache's replies, in the store (an aside record, see store.PutAside) together with each binlog follower's
// checkpoint; at start it puts them back and the followers resume from those checkpoints.
//
// Why a snapshot at stop and not copies written as they are filled: copies are ephemeral on purpose (a fill
// costs no disk write), and what makes a copy trustworthy after a restart is not the copy but the checkpoint
// that vouches for it. One snapshot orders the two simply:
//
//   - Save reads every follower's checkpoint first, then keeps only the copies valid at that moment. A follower's
//     checkpoint counts a commit only after the commit's invalidations were made, so a copy still valid then
//     reflects every commit up to the checkpoint that touched its row.
//   - Restore takes each table's stamp before the followers start (Prepare), then the followers replay every
//     commit after the checkpoint, and copies are stored under those stamps (Restore): a copy whose row a
//     replayed commit changed is dropped, exactly as a fill that raced a write is. Nothing is served until the
//     followers vouch again (they have caught up with the primary), as after any start.
//   - The binlog no longer holding the checkpoint (purged, reset) makes the follower drop every copy, restored
//     or not, and say so; a snapshot whose groups (name, primary, invalidation mode) or containers' shapes differ
//     from the configuration is not restored at all, and the log says why.
//
// An older snapshot stays safe (its checkpoint is older, so more is replayed), which is why a snapshot is left in
// place after a restore: after a crash the next start restores it again rather than starting cold. TTL-bounded
// replies keep their absolute expiry.
package warm

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/keywaydb/keyway/internal/binlog"
	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
)

// blobName is the snapshot's aside record in the store.
const blobName = "warm-cache"

// version changes when the snapshot's encoding does; a snapshot of another version is not restored.
const version = 1

// Group is one backend group as the snapshot records it: a snapshot is restored only into the same groups.
type Group struct {
	Name, Primary string
	Mode          string             // "binlog" (a follower ran: Checkpoint is set), "ttl", "none" or "off"
	Checkpoint    *binlog.Checkpoint // where the follower had applied every commit, read before the copies
}

// MaxBytes bounds the keys and values a snapshot carries: the snapshot is built in memory at stop, and a store
// of many GiB should not double keyway's memory on the way out. Copies past it are left out (the restart is
// then partly cold).
const MaxBytes = 256 << 20

// Counts say what a save or a restore carried.
type Counts struct {
	Rows    int `json:"rows"`    // caching containers' copies
	Results int `json:"results"` // SQL result cache entries
	Skipped int `json:"skipped"` // copies left out of a snapshot past MaxBytes
}

type snapshot struct {
	Version int
	Saved   time.Time
	Groups  []Group
	Shapes  map[string]string // container name → engine.Table.ContainerShape
	Copies  []engine.SavedCopy
	Results []qcache.Saved
}

// Save writes the snapshot of what eng's caching containers and qc (nil: none) hold now. groups must have been
// read before Save is called (the checkpoints come before the copies; see the package comment). shapes are the
// containers' shapes by name.
func Save(st *store.Store, groups []Group, shapes map[string]string, eng *engine.Engine, qc *qcache.Cache) (Counts, error) {
	s := snapshot{Version: version, Saved: time.Now(), Groups: groups, Shapes: shapes}
	var n Counts
	budget := MaxBytes
	fits := func(size int) bool {
		if size > budget {
			n.Skipped++
			return false
		}
		budget -= size
		return true
	}
	if qc != nil { // replies first, then rows, while the budget lasts
		qc.Save(func(r qcache.Saved) {
			if fits(len(r.Key) + len(r.Reply)) {
				s.Results = append(s.Results, r)
			}
		})
	}
	eng.SaveCopies(func(c engine.SavedCopy) {
		if fits(len(c.Key) + len(c.Item.Value)) {
			s.Copies = append(s.Copies, c)
		}
	})
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(&s); err != nil {
		return Counts{}, fmt.Errorf("warm restart: encoding the snapshot: %w", err)
	}
	if err := st.PutAside(blobName, buf.Bytes()); err != nil {
		return Counts{}, fmt.Errorf("warm restart: %w", err)
	}
	n.Rows, n.Results = len(s.Copies), len(s.Results)
	return n, nil
}

// Snapshot is a loaded snapshot, to be restored.
type Snapshot struct {
	s snapshot
	// Stamps taken by Prepare, before the followers start.
	copyStamps map[string]uint64
	tables     map[validity.TableID]qcache.Dep
}

// Load reads the snapshot the last clean stop saved: nil when there is none (or the store keeps nothing on disk).
func Load(st *store.Store) (*Snapshot, error) {
	data, err := st.Aside(blobName)
	if errors.Is(err, store.ErrNoDisk) || (err == nil && data == nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("warm restart: %w", err)
	}
	var s snapshot
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&s); err != nil || s.Version != version {
		return nil, fmt.Errorf("warm restart: the saved snapshot is unreadable (version %d, err %v): starting cold", s.Version, err)
	}
	return &Snapshot{s: s}, nil
}

// Saved is when the snapshot was written.
func (sn *Snapshot) Saved() time.Time { return sn.s.Saved }

// Resume is the checkpoint group's follower should resume from, or nil.
func (sn *Snapshot) Resume(group string) *binlog.Checkpoint {
	if sn == nil {
		return nil
	}
	for _, g := range sn.s.Groups {
		if g.Name == group {
			return g.Checkpoint
		}
	}
	return nil
}

// Prepare takes the stamps the copies will be restored under. Call it before any binlog follower starts: every
// commit the followers apply from then on invalidates what it touches.
func (sn *Snapshot) Prepare(reg *validity.Registry, eng *engine.Engine) {
	sn.copyStamps = map[string]uint64{}
	for _, c := range sn.s.Copies {
		if _, ok := sn.copyStamps[c.Container]; !ok {
			if stamp, ok := eng.CopyStamp(c.Container); ok {
				sn.copyStamps[c.Container] = stamp
			}
		}
	}
	sn.tables = map[validity.TableID]qcache.Dep{}
	for _, r := range sn.s.Results {
		for _, id := range r.Tables {
			if _, ok := sn.tables[id]; !ok {
				t := reg.Table(id) // registered now, so the followers invalidate it
				sn.tables[id] = qcache.Dep{Table: t, Stamp: t.Stamp()}
			}
		}
	}
}

// Restore puts the copies back, after Prepare and after the followers started, when running (the groups as they
// run now, with the checkpoints their followers resumed from) and shapes match the snapshot's. Otherwise it
// restores nothing and says why.
func (sn *Snapshot) Restore(running []Group, shapes map[string]string, eng *engine.Engine, qc *qcache.Cache) (Counts, error) {
	if why := sn.mismatch(running); why != "" {
		return Counts{}, errors.New(why)
	}
	var n Counts
	for _, c := range sn.s.Copies {
		stamp, ok := sn.copyStamps[c.Container]
		if ok && shapes[c.Container] == sn.s.Shapes[c.Container] && eng.RestoreCopy(c, stamp) {
			n.Rows++
		}
	}
	if qc != nil {
		for _, r := range sn.s.Results {
			deps := make([]qcache.Dep, 0, len(r.Tables))
			for _, id := range r.Tables {
				deps = append(deps, sn.tables[id])
			}
			if qc.Restore(r, deps) {
				n.Results++
			}
		}
	}
	return n, nil
}

// mismatch says why the snapshot does not fit the groups running now ("" when it does).
func (sn *Snapshot) mismatch(running []Group) string {
	key := func(g Group) string { return g.Name + "\x00" + g.Primary + "\x00" + g.Mode }
	var was, now []string
	for _, g := range sn.s.Groups {
		was = append(was, key(g))
	}
	for _, g := range running {
		now = append(now, key(g))
	}
	slices.Sort(was)
	slices.Sort(now)
	if !slices.Equal(was, now) {
		return fmt.Sprintf("the backend groups changed since the snapshot (name, primary or invalidation mode): was %v, now %v", names(sn.s.Groups), names(running))
	}
	for _, g := range running {
		saved := sn.Resume(g.Name)
		if g.Mode == "binlog" && (saved == nil || g.Checkpoint == nil || *saved != *g.Checkpoint) {
			return fmt.Sprintf("group %q's binlog follower did not resume from the saved checkpoint", g.Name)
		}
	}
	return ""
}

func names(gs []Group) []string {
	out := make([]string, 0, len(gs))
	for _, g := range gs {
		out = append(out, fmt.Sprintf("%s@%s/%s", g.Name, g.Primary, g.Mode))
	}
	return out
}

package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

func set(t *testing.T, s *Store, key, value string, exptime int64) Item {
	t.Helper()
	it, err := s.Update([]byte(key), func(*Item) (Action, Item) {
		return Replace, Item{Value: []byte(value), Flags: 3, Exptime: exptime}
	})
	if err != nil {
		t.Fatalf("set %s: %v", key, err)
	}
	return it
}

func TestCASIsUniqueAndChanges(t *testing.T) {
	s, err := Open(Options{MemoryLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := set(t, s, "a", "1", 0)
	b := set(t, s, "b", "1", 0)
	a2 := set(t, s, "a", "2", 0)
	if a.CAS == 0 || a.CAS == b.CAS || a2.CAS == a.CAS {
		t.Fatalf("cas ids not unique: %d %d %d", a.CAS, b.CAS, a2.CAS)
	}
}

func TestEvictionKeepsUnderLimitAndPrefersUnvisited(t *testing.T) {
	const limit = 1 << 20
	s, err := Open(Options{MemoryLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	value := string(make([]byte, 100))
	hot := []string{"hot-1", "hot-2", "hot-3"}
	for _, k := range hot {
		set(t, s, k, value, 0)
	}
	for i := 0; i < 50000; i++ {
		set(t, s, fmt.Sprintf("cold-%d", i), value, 0)
		if i%100 == 0 {
			for _, k := range hot {
				if _, ok := s.Get([]byte(k)); !ok {
					t.Fatalf("hot key %s evicted after %d cold sets", k, i)
				}
			}
		}
	}
	st := s.Stats()
	if st.Bytes > limit || st.Evictions == 0 {
		t.Fatalf("bytes %d (limit %d), evictions %d", st.Bytes, limit, st.Evictions)
	}
}

func TestTooLargeForShard(t *testing.T) {
	s, err := Open(Options{MemoryLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Update([]byte("k"), func(*Item) (Action, Item) {
		return Replace, Item{Value: make([]byte, 1<<20)}
	})
	if err != ErrNoMemory {
		t.Fatalf("err = %v, want ErrNoMemory", err)
	}
}

func TestExpiryLazyAndCrawled(t *testing.T) {
	var now atomic.Int64
	now.Store(1000)
	s, err := Open(Options{MemoryLimit: 1 << 20, Now: now.Load})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	set(t, s, "a", "x", 1005)
	set(t, s, "b", "x", 1005)
	set(t, s, "c", "x", 0)
	if _, ok := s.Get([]byte("a")); !ok {
		t.Fatal("a missing before expiry")
	}
	now.Store(1005)
	if _, ok := s.Get([]byte("a")); ok {
		t.Fatal("a live at its exptime")
	}
	for i := range s.shards {
		s.crawlShard(&s.shards[i], now.Load(), 100)
	}
	if st := s.Stats(); st.CurrItems != 1 || st.Expired != 2 {
		t.Fatalf("after crawl: %d items, %d expired; want 1, 2", st.CurrItems, st.Expired)
	}
}

func TestPersistenceRoundTrip(t *testing.T) {
	for _, d := range []Durability{DurabilityAsync, DurabilitySync} {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{MemoryLimit: 8 << 20, DataDir: dir, Durability: d, FlushInterval: 50 * time.Millisecond}
			s, err := Open(o)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 100; i++ {
				set(t, s, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i), 0)
			}
			last := set(t, s, "k1", "changed", 0)
			s.Update([]byte("k2"), func(*Item) (Action, Item) { return Remove, Item{} })
			s.Touch([]byte("k3"), 1) // long past: gone after restart
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = Open(o)
			if err != nil {
				t.Fatal(err)
			}
			it, ok := s.Get([]byte("k1"))
			if !ok || string(it.Value) != "changed" || it.Flags != 3 || it.CAS != last.CAS {
				t.Fatalf("k1 after restart: %+v %v", it, ok)
			}
			if _, ok := s.Get([]byte("k2")); ok {
				t.Fatal("deleted k2 came back")
			}
			if _, ok := s.Get([]byte("k3")); ok {
				t.Fatal("expired k3 came back")
			}
			if n := set(t, s, "new", "x", 0); n.CAS <= last.CAS {
				t.Fatalf("cas after restart %d not above %d", n.CAS, last.CAS)
			}
			if err := s.FlushAll(); err != nil {
				t.Fatal(err)
			}
			set(t, s, "after-flush", "x", 0)
			s.Close()
			s, err = Open(o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if st := s.Stats(); st.CurrItems != 1 {
				t.Fatalf("after flush and restart: %d items, want 1", st.CurrItems)
			}
		})
	}
}

// TestSyncGroupCommit: concurrent sync writers are all durable when
// acknowledged, and share syncs (fewer commit rounds than writes).
func TestSyncGroupCommit(t *testing.T) {
	dir := t.TempDir()
	o := Options{MemoryLimit: 64 << 20, DataDir: dir, Durability: DurabilitySync}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				set(t, s, fmt.Sprintf("w%d-%d", w, i), "v", 0)
			}
		}(w)
	}
	wg.Wait()
	// Reopen Pebble without closing the store: what is there was synced.
	snap, err := s.disk.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for snap.First(); snap.Valid(); snap.Next() {
		n++
	}
	snap.Close()
	rounds := s.disk.rounds.Load()
	s.Close()
	t.Logf("%d sync writes in %d commit rounds", 16*200, rounds)
	if rounds >= 16*200 {
		t.Fatalf("every write had its own commit round (%d): no group commit", rounds)
	}
	if n != 16*200+1 { // + the format key
		t.Fatalf("%d keys on disk, want %d", n, 16*200+1)
	}
}

func TestLoadRespectsSmallerLimit(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{MemoryLimit: 16 << 20, DataDir: dir, Durability: DurabilitySync})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20000; i++ {
		set(t, s, fmt.Sprintf("k%d", i), string(make([]byte, 400)), 0)
	}
	s.Close()
	s, err = Open(Options{MemoryLimit: 2 << 20, DataDir: dir, Durability: DurabilitySync})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.Stats(); st.Bytes > 2<<20 || st.CurrItems == 0 {
		t.Fatalf("loaded %d bytes, %d items under a 2 MiB limit", st.Bytes, st.CurrItems)
	}
}

// TestFullDiskRefusesWrites: when the WAL cannot be written (a full disk),
// sync writes are refused with ErrPersist, reads go on, and nothing panics.
func TestFullDiskRefusesWrites(t *testing.T) {
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if full.Load() && (op == errorfs.OpFileWrite || op == errorfs.OpFileSync) && strings.HasSuffix(path, ".log") {
			return syscall.ENOSPC
		}
		return nil
	}))
	s, err := Open(Options{MemoryLimit: 8 << 20, DataDir: t.TempDir(), Durability: DurabilitySync, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	set(t, s, "before", "v", 0)
	full.Store(true)
	_, err = s.Update([]byte("after"), func(*Item) (Action, Item) { return Replace, Item{Value: []byte("v")} })
	if !errors.Is(err, ErrPersist) {
		t.Fatalf("write on a full disk: %v, want ErrPersist", err)
	}
	_, err = s.Update([]byte("again"), func(*Item) (Action, Item) { return Replace, Item{Value: []byte("v")} })
	if !errors.Is(err, ErrPersist) {
		t.Fatalf("second write on a failed disk: %v, want ErrPersist", err)
	}
	for _, k := range []string{"after", "again"} {
		if _, ok := s.Get([]byte(k)); ok {
			t.Fatalf("refused write of %s is visible in memory", k)
		}
	}
	if _, ok := s.Get([]byte("before")); !ok {
		t.Fatal("reads stopped after the disk failed")
	}
	// Ephemeral copies never touch the disk: caching and dropping them goes on.
	eph := func(action Action) (Item, error) {
		return s.Update([]byte("copy"), func(*Item) (Action, Item) { return action, Item{Value: []byte("c"), Ephemeral: true} })
	}
	if _, err := eph(Replace); err != nil {
		t.Fatalf("ephemeral replace on a failed disk: %v", err)
	}
	if _, err := eph(Remove); err != nil {
		t.Fatalf("ephemeral remove on a failed disk: %v", err)
	}
	if _, ok := s.Get([]byte("copy")); ok {
		t.Fatal("removed ephemeral copy still there")
	}
	// Replacing a persisted item, even with an ephemeral one, deletes from the disk.
	if _, err := s.Update([]byte("before"), func(*Item) (Action, Item) { return Replace, Item{Value: []byte("c"), Ephemeral: true} }); !errors.Is(err, ErrPersist) {
		t.Fatalf("ephemeral replace of a persisted item on a failed disk: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrPersist) {
		t.Fatalf("close after failure: %v", err)
	}
}

// TestJournalSurvivesRestartAndFlush: journal records come back after a
// restart (not as items), flush_all leaves them, and deleted ones stay gone.
func TestJournalSurvivesRestartAndFlush(t *testing.T) {
	o := Options{MemoryLimit: 1 << 20, DataDir: t.TempDir(), Durability: DurabilitySync}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"@@a.1", "@@a.2", "@@b.1"} {
		if err := s.JournalPut(k, []byte("v"+k))(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.JournalPut("@@a.1", []byte("newer"))(); err != nil {
		t.Fatal(err)
	}
	if err := s.JournalDelete("@@a.2")(); err != nil {
		t.Fatal(err)
	}
	set(t, s, "item", "x", 0)
	if err := s.FlushAll(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.Stats(); st.CurrItems != 0 {
		t.Fatalf("journal records or flushed items loaded as items: %d", st.CurrItems)
	}
	a := s.TakeJournal("@@a.")
	if len(a) != 1 || string(a["@@a.1"]) != "newer" {
		t.Fatalf("journal @@a.: %q", a)
	}
	if again := s.TakeJournal("@@a."); len(again) != 0 {
		t.Fatalf("taken twice: %q", again)
	}
	if b := s.TakeJournal("@@b."); len(b) != 1 || string(b["@@b.1"]) != "v@@b.1" {
		t.Fatalf("journal @@b.: %q", b)
	}
}

// TestEphemeralItemsNeverReachDisk: ephemeral items are served from memory,
// are not there after a restart, and replacing a persisted version with an
// ephemeral one removes the persisted one.
func TestEphemeralItemsNeverReachDisk(t *testing.T) {
	o := Options{MemoryLimit: 1 << 20, DataDir: t.TempDir(), Durability: DurabilitySync}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	set(t, s, "was-persisted", "old", 0)
	set(t, s, "kept", "v", 0)
	rounds := s.disk.rounds.Load()
	for _, k := range []string{"was-persisted", "cached"} {
		if _, err := s.Update([]byte(k), func(*Item) (Action, Item) {
			return Replace, Item{Value: []byte("copy"), Ephemeral: true}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if it, ok := s.Get([]byte("cached")); !ok || string(it.Value) != "copy" || !it.Ephemeral {
		t.Fatalf("ephemeral item in memory: %+v %v", it, ok)
	}
	// Removing an ephemeral item writes nothing either.
	s.Update([]byte("cached"), func(*Item) (Action, Item) { return Remove, Item{} })
	s.Update([]byte("cached"), func(*Item) (Action, Item) { return Replace, Item{Value: []byte("again"), Ephemeral: true} })
	if got := s.disk.rounds.Load() - rounds; got > 1 { // at most the round deleting was-persisted
		t.Fatalf("%d commit rounds for ephemeral changes", got)
	}
	s.Close()
	s, err = Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"was-persisted", "cached"} {
		if it, ok := s.Get([]byte(k)); ok {
			t.Fatalf("%s after restart: %q", k, it.Value)
		}
	}
	if _, ok := s.Get([]byte("kept")); !ok {
		t.Fatal("persisted item lost")
	}
}

// walSyncGate is a Pebble filesystem whose WAL syncs can be held: while armed,
// the next write to a .log file (the WAL writer writes, then syncs; errorfs
// cannot intercept the SyncData that Pebble's WAL uses) reports on entered and
// waits for release.
type walSyncGate struct {
	armed    atomic.Bool
	entered  chan struct{}
	release  chan struct{}
	released sync.Once
}

// open lets the held write, and every later one, through; it may be called again.
func (g *walSyncGate) open() { g.released.Do(func() { close(g.release) }) }

// gatedStore is a sync store on a walSyncGate, closed at the test's end after the gate is opened (Close waits for
// the committer, which a held write would hold).
func gatedStore(t *testing.T) (*walSyncGate, *Store) {
	t.Helper()
	g, fs := newWALSyncGate()
	s, err := Open(Options{MemoryLimit: 8 << 20, DataDir: t.TempDir(), Durability: DurabilitySync, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.open(); s.Close() })
	return g, s
}

func newWALSyncGate() (*walSyncGate, vfs.FS) {
	g := &walSyncGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op == errorfs.OpFileWrite && strings.HasSuffix(path, ".log") && g.armed.CompareAndSwap(true, false) {
			g.entered <- struct{}{}
			<-g.release
		}
		return nil
	}))
	return g, fs
}

// TestSyncGroupCommitGathers: with sync durability, a writer that sends its next write as soon as the last one is
// answered joins the round of the writes that queued meanwhile, instead of the committer syncing those at once and
// the answered writer's write alone after them.
func TestSyncGroupCommitGathers(t *testing.T) {
	g, s := gatedStore(t)
	// Long enough for a goroutine to come back on a loaded machine; the round it follows takes longer still.
	s.disk.gatherMax = time.Minute
	set(t, s, "warm", "v", 0)
	before := s.disk.rounds.Load()

	g.armed.Store(true)
	var wg sync.WaitGroup
	write := func(key string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			set(t, s, key, "v-"+key, 0)
		}()
	}
	wg.Add(1)
	go func() { // A: a1 alone in a round held in its WAL write; a2 once a1 is answered
		defer wg.Done()
		set(t, s, "a1", "v-a1", 0)
		// Later than a committer that does not gather starts the next round, well within the last round's time.
		time.Sleep(50 * time.Millisecond)
		set(t, s, "a2", "v-a2", 0)
	}()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("a1's WAL write never started")
	}
	write("b")
	write("c")
	for deadline := time.Now().Add(10 * time.Second); s.disk.seq.Load()-s.disk.visible.Load() < 3; {
		if time.Now().After(deadline) {
			t.Fatal("b and c never appended")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a1's round takes longer than A takes to come back
	g.open()
	wg.Wait()
	if n := s.disk.rounds.Load() - before; n != 2 {
		t.Fatalf("%d commit rounds, want 2: a1 alone, then b, c and a2 together", n)
	}
	for _, k := range []string{"a1", "a2", "b", "c"} {
		if it, ok := s.Get([]byte(k)); !ok || string(it.Value) != "v-"+k {
			t.Errorf("%s: %q %v", k, it.Value, ok)
		}
	}
}

// TestSyncWriteInvisibleUntilSynced: with sync durability, a reader does not
// see a write while its WAL sync is in flight (a crash then would lose a
// write somebody read); it sees the value before, and the write once synced.
func TestSyncWriteInvisibleUntilSynced(t *testing.T) {
	g, s := gatedStore(t)
	set(t, s, "k", "old", 0)

	g.armed.Store(true)
	var released atomic.Bool
	releaseSync := func() { released.Store(true); g.open() }
	wrote := make(chan error, 1)
	go func() {
		_, err := s.Update([]byte("k"), func(*Item) (Action, Item) { return Replace, Item{Value: []byte("new")} })
		wrote <- err
	}()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the write's WAL sync never started")
	}
	// The write is in memory and in the WAL, not yet synced.
	if it, ok := s.Get([]byte("k")); !ok || string(it.Value) != "old" {
		t.Fatalf("Get during the sync: %q %v, want the old value", it.Value, ok)
	}
	if it, ok := s.Peek([]byte("k")); !ok || string(it.Value) != "old" {
		t.Fatalf("Peek during the sync: %q %v, want the old value", it.Value, ok)
	}
	if _, ok := s.Get([]byte("absent")); ok {
		t.Fatal("absent key found")
	}
	// A read through Update (as mg does) may not answer with the unsynced value either.
	read := make(chan string, 1)
	go func() {
		it, err := s.Update([]byte("k"), func(*Item) (Action, Item) { return Keep, Item{} })
		if err != nil {
			read <- "error: " + err.Error()
			return
		}
		v := string(it.Value)
		if v == "new" && !released.Load() {
			v = "new, before the sync returned"
		}
		read <- v
	}()
	select {
	case v := <-read:
		t.Fatalf("read through Update during the sync answered %q", v)
	case <-time.After(100 * time.Millisecond):
	}
	releaseSync()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if v := <-read; v != "new" {
		t.Fatalf("read through Update after the sync: %q", v)
	}
	if it, ok := s.Get([]byte("k")); !ok || string(it.Value) != "new" {
		t.Fatalf("Get after the sync: %q %v", it.Value, ok)
	}
}

// fullDiskFS fails every WAL write and sync once full is set.
func fullDiskFS(full *atomic.Bool) vfs.FS {
	return errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if full.Load() && (op == errorfs.OpFileWrite || op == errorfs.OpFileSync) && strings.HasSuffix(path, ".log") {
			return syscall.ENOSPC
		}
		return nil
	}))
}

// TestEveryWaiterToldOfFailure: many sync writers wait on one WAL sync that
// fails, while the committer keeps running (failed) rounds for other writers.
// No writer may be told that its write succeeded unless it is on disk: a
// restart from the files finds every acknowledged write. (Waiters were once
// answered from a list of the last 64 failed rounds; one that woke after more
// rounds than that was told yes.)
func TestEveryWaiterToldOfFailure(t *testing.T) {
	var full atomic.Bool
	var armed atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if !strings.HasSuffix(path, ".log") || (op != errorfs.OpFileWrite && op != errorfs.OpFileSync) {
			return nil
		}
		if op == errorfs.OpFileWrite && armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
			full.Store(true)
		}
		if full.Load() {
			return syscall.ENOSPC
		}
		return nil
	}))
	dir := t.TempDir()
	s, err := Open(Options{MemoryLimit: 64 << 20, DataDir: dir, Durability: DurabilitySync, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	set(t, s, "before", "v", 0)
	armed.Store(true)
	var mu sync.Mutex
	var acked []string
	var refused int
	var wg sync.WaitGroup
	write := func(k string) {
		defer wg.Done()
		_, err := s.Update([]byte(k), func(*Item) (Action, Item) { return Replace, Item{Value: []byte("v")} })
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			acked = append(acked, k)
		} else {
			refused++
		}
	}
	wg.Add(1)
	go write("first")
	<-entered // the committer is in the sync that will fail
	const writers = 2000
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go write(fmt.Sprint("w", w))
	}
	for s.disk.seq.Load() < writers { // all appended and waiting
		time.Sleep(time.Millisecond)
	}
	var stop atomic.Bool
	var spin sync.WaitGroup
	for g := 0; g < 8; g++ {
		spin.Add(1)
		go func(g int) { // more failed rounds while the waiters wake
			defer spin.Done()
			for !stop.Load() {
				s.JournalPut(fmt.Sprint("spin-", g), []byte("v"))()
			}
		}(g)
	}
	close(release)
	wg.Wait()
	stop.Store(true)
	spin.Wait()
	s.Close()
	if refused == 0 {
		t.Fatal("no write was refused: the disk never failed")
	}
	// The failed Pebble stays open (and locked); what its files hold is what a
	// restart after a crash would find.
	s, err = Open(Options{MemoryLimit: 64 << 20, DataDir: copyDir(t, dir), Durability: DurabilitySync})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var lost []string
	for _, k := range acked {
		if _, ok := s.Get([]byte(k)); !ok {
			lost = append(lost, k)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes missing after restart (e.g. %s); %d were refused", len(lost), len(acked), lost[0], refused)
	}
}

func copyDir(t *testing.T, dir string) string {
	t.Helper()
	// Pebble may remove an obsolete file (an OPTIONS file it replaced) between the listing and the read: copy again.
	for range 10 {
		if to, ok := copyDirOnce(t, dir); ok {
			return to
		}
	}
	t.Fatalf("copy of %s: files kept vanishing", dir)
	return ""
}

// copyDirOnce copies dir's files; false when one vanished before it was read.
func copyDirOnce(t *testing.T, dir string) (string, bool) {
	t.Helper()
	to := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			return "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return to, true
}

// TestFlushAllRefusedOnFailedDisk: flush_all on a failed disk is refused
// without emptying memory (the items would come back at the next start).
func TestFlushAllRefusedOnFailedDisk(t *testing.T) {
	var full atomic.Bool
	s, err := Open(Options{MemoryLimit: 8 << 20, DataDir: t.TempDir(), Durability: DurabilitySync, FS: fullDiskFS(&full)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	set(t, s, "kept", "v", 0)
	full.Store(true)
	if _, err := s.Update([]byte("x"), func(*Item) (Action, Item) { return Replace, Item{Value: []byte("v")} }); !errors.Is(err, ErrPersist) {
		t.Fatalf("write on a full disk: %v, want ErrPersist", err)
	}
	if err := s.FlushAll(); !errors.Is(err, ErrPersist) {
		t.Fatalf("flush_all on a failed disk: %v, want ErrPersist", err)
	}
	if it, ok := s.Get([]byte("kept")); !ok || string(it.Value) != "v" {
		t.Fatalf("refused flush_all emptied memory: %q %v", it.Value, ok)
	}
}

// clockStore opens a memory-only store whose clock is the returned counter.
func clockStore(t *testing.T, o Options) (*Store, *atomic.Int64) {
	t.Helper()
	now := new(atomic.Int64)
	now.Store(1_700_000_000)
	o.Now = now.Load
	if o.MemoryLimit == 0 {
		o.MemoryLimit = 8 << 20
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, now
}

func live(s *Store, key string) bool {
	_, ok := s.Get([]byte(key))
	return ok
}

// TestDelayedFlushOneDeadline: a later FlushAt replaces the pending deadline,
// either way (memcached keeps one oldest_live), and nothing is flushed before it.
func TestDelayedFlushOneDeadline(t *testing.T) {
	s, now := clockStore(t, Options{})
	defer s.Close()
	t0 := now.Load()
	set(t, s, "a", "v", 0)
	if err := s.FlushAt(t0 + 100); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushAt(t0 + 10); err != nil { // sooner: replaces the first
		t.Fatal(err)
	}
	now.Store(t0 + 9)
	if !live(s, "a") {
		t.Fatal("flushed before the deadline")
	}
	now.Store(t0 + 10)
	if live(s, "a") {
		t.Fatal("a still live at the replacing deadline")
	}
	set(t, s, "b", "v", 0) // stored at the deadline: after it
	now.Store(t0 + 100)
	if !live(s, "b") {
		t.Fatal("the replaced deadline still flushed")
	}

	// Later replaces sooner too: the first deadline passes without effect.
	if err := s.FlushAt(t0 + 110); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushAt(t0 + 200); err != nil {
		t.Fatal(err)
	}
	now.Store(t0 + 150)
	if err := s.sweepFlushed(); err != nil {
		t.Fatal(err)
	}
	if !live(s, "b") {
		t.Fatal("the replaced (sooner) deadline still flushed")
	}
	now.Store(t0 + 200)
	if live(s, "b") {
		t.Fatal("b still live at the replacing deadline")
	}
	// An immediate flush cancels a pending one.
	if err := s.FlushAt(t0 + 300); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushAll(); err != nil {
		t.Fatal(err)
	}
	set(t, s, "c", "v", 0)
	now.Store(t0 + 300)
	if !live(s, "c") {
		t.Fatal("flush_all did not cancel the pending delayed flush")
	}
}

// TestDelayedFlushTakesItemsSetBeforeIt is memcached's rule (t/flush-all.t):
// an item stored after "flush_all <future>" was issued but before the
// deadline is gone at the deadline; one stored at or after it stays. Items
// touched by a fetch after the deadline are judged before the fetch.
func TestDelayedFlushTakesItemsSetBeforeIt(t *testing.T) {
	s, now := clockStore(t, Options{})
	defer s.Close()
	t0 := now.Load()
	set(t, s, "old", "v", 0)
	if err := s.FlushAt(t0 + 10); err != nil {
		t.Fatal(err)
	}
	now.Store(t0 + 5)
	set(t, s, "between", "v", 0)
	if !live(s, "between") || !live(s, "old") {
		t.Fatal("items gone before the deadline")
	}
	now.Store(t0 + 10)
	if _, err := s.Update([]byte("between"), func(cur *Item) (Action, Item) {
		if cur != nil {
			t.Error("Update sees a flushed item")
		}
		return Keep, Item{}
	}); err != nil {
		t.Fatal(err)
	}
	if live(s, "old") {
		t.Fatal("old item live after the deadline")
	}
	set(t, s, "after", "v", 0)
	if !live(s, "after") {
		t.Fatal("item stored at the deadline is gone")
	}
	if err := s.sweepFlushed(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.CurrItems != 1 {
		t.Fatalf("sweep left %d items, want 1 (after)", st.CurrItems)
	}
}

// TestDelayedFlushNotResurrectedByRestart: once the deadline has come, the
// flushed items are deleted from the disk too; a restart does not bring them back.
func TestDelayedFlushNotResurrectedByRestart(t *testing.T) {
	dir := t.TempDir()
	s, now := clockStore(t, Options{DataDir: dir, Durability: DurabilitySync})
	t0 := now.Load()
	set(t, s, "old", "v", 0)
	if err := s.FlushAt(t0 + 10); err != nil {
		t.Fatal(err)
	}
	now.Store(t0 + 10)
	set(t, s, "new", "v", 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = clockStore(t, Options{DataDir: dir, Durability: DurabilitySync})
	defer s.Close()
	if live(s, "old") {
		t.Fatal("a delayed flush_all's item came back after a restart")
	}
	if !live(s, "new") {
		t.Fatal("item stored after the deadline lost in the restart")
	}
}

// TestDelayedFlushRefusedOnFailedDisk: like flush_all, a delayed one is
// refused on a failed disk and sets no deadline.
func TestDelayedFlushRefusedOnFailedDisk(t *testing.T) {
	var full atomic.Bool
	s, now := clockStore(t, Options{DataDir: t.TempDir(), Durability: DurabilitySync, FS: fullDiskFS(&full)})
	defer s.Close()
	set(t, s, "kept", "v", 0)
	full.Store(true)
	if _, err := s.Update([]byte("x"), func(*Item) (Action, Item) { return Replace, Item{Value: []byte("v")} }); !errors.Is(err, ErrPersist) {
		t.Fatalf("write on a full disk: %v, want ErrPersist", err)
	}
	if err := s.FlushAt(now.Load() + 10); !errors.Is(err, ErrPersist) {
		t.Fatalf("delayed flush_all on a failed disk: %v, want ErrPersist", err)
	}
	now.Add(10)
	if !live(s, "kept") {
		t.Fatal("refused delayed flush_all still flushed")
	}
}

// journaledThenAsync journals value under key in a new data directory with sync durability, then opens it again
// with async durability and no commit round before an hour (so only a wait for the disk makes one); the store is
// closed when the test ends.
func journaledThenAsync(t *testing.T, key, value string) (dir string, s *Store) {
	t.Helper()
	dir = t.TempDir()
	s, err := Open(Options{MemoryLimit: 1 << 20, DataDir: dir, Durability: DurabilitySync})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.JournalPut(key, []byte(value))(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(Options{MemoryLimit: 1 << 20, DataDir: dir, Durability: DurabilityAsync, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return dir, s
}

// TestJournalDeleteOnDiskWhateverDurability: with async durability, the wait
// of a JournalDelete returns only once the removal is on disk, so a crash
// right after cannot bring the record back (a write-behind replay would
// then write an old row over a newer one).
func TestJournalDeleteOnDiskWhateverDurability(t *testing.T) {
	dir, s := journaledThenAsync(t, "@@a.1", "old")
	if got := s.TakeJournal("@@a."); len(got) != 1 {
		t.Fatalf("journal before the delete: %q", got)
	}
	if err := s.JournalDelete("@@a.1")(); err != nil {
		t.Fatal(err)
	}
	crashed := copyDir(t, dir) // what the disk holds if keyway dies now
	c, err := Open(Options{MemoryLimit: 1 << 20, DataDir: crashed, Durability: DurabilitySync})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.TakeJournal("@@a."); len(got) != 0 {
		t.Fatalf("a removed journal record came back after a crash: %q", got)
	}
}

// TestJournalRemovalCancelsPendingPut: a journal record the disk has not received yet is taken back when a later
// one makes it moot. A removal of a key whose put is still pending costs the disk nothing (no round writes) when
// the disk holds no record of the key, and still reaches the disk when it does; a put overtaken by a put of the
// same key never reaches it. A crash after leaves each key's latest record.
func TestJournalRemovalCancelsPendingPut(t *testing.T) {
	dir, s := journaledThenAsync(t, "@@a.2", "old")
	s.TakeJournal("@@a.")
	rounds := s.disk.rounds.Load()
	if err := s.JournalPut("@@a.1", []byte("v1"))(); err != nil {
		t.Fatal(err)
	}
	if err := s.JournalDelete("@@a.1")(); err != nil {
		t.Fatal(err)
	}
	if n := s.disk.rounds.Load() - rounds; n != 0 {
		t.Fatalf("a put removed before it left memory cost %d commit rounds, want none", n)
	}
	for _, v := range []string{"p1", "p2"} {
		if err := s.JournalPut("@@a.3", []byte(v))(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.JournalPut("@@a.2", []byte("new"))(); err != nil {
		t.Fatal(err)
	}
	if err := s.JournalDelete("@@a.2")(); err != nil { // the disk holds "old": the removal must reach it
		t.Fatal(err)
	}
	crashed := copyDir(t, dir)
	c, err := Open(Options{MemoryLimit: 1 << 20, DataDir: crashed, Durability: DurabilitySync})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.TakeJournal("@@a."); len(got) != 1 || string(got["@@a.3"]) != "p2" {
		t.Fatalf("journal after a crash: %q, want only @@a.3 = p2", got)
	}
}

// SetLimit (cache_memlimit) evicts at once down to a lower limit, and a
// higher one lets more stay; Walk sees every live item, not expired ones.
func TestSetLimitAndWalk(t *testing.T) {
	s, err := Open(Options{MemoryLimit: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	value := string(make([]byte, 1000))
	for i := 0; i < 3000; i++ {
		set(t, s, fmt.Sprintf("k%d", i), value, 0)
	}
	set(t, s, "gone", "x", 1)
	if st := s.Stats(); st.Evictions != 0 || st.TailAccess == 0 {
		t.Fatalf("before: %+v", st)
	}
	if err := s.SetLimit(1 << 20); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Limit != 1<<20 || st.Bytes > 1<<20 || st.Evictions == 0 {
		t.Fatalf("after lowering: %+v", st)
	}
	seen := 0
	s.Walk(func(key string, it Item) bool {
		if key == "gone" || len(it.Value) != 1000 {
			t.Errorf("walk saw %q (%d bytes)", key, len(it.Value))
		}
		seen++
		return true
	})
	if int64(seen) != st.CurrItems-1 && int64(seen) != st.CurrItems {
		t.Fatalf("walk saw %d items, store holds %d", seen, st.CurrItems)
	}
	if err := s.SetLimit(0); err == nil {
		t.Fatal("SetLimit(0) accepted")
	}
}

// TestDataDirInUse: a second store on a data directory another one holds says so, not that the directory may not
// exist or be writable.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(Options{MemoryLimit: 1 << 20, DataDir: dir, Durability: DurabilityAsync})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = Open(Options{MemoryLimit: 1 << 20, DataDir: dir, Durability: DurabilityAsync})
	if err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second open of a held data_dir: %v, want it named in use", err)
	}
}

// TestItemLayout guards the Item's layout (no padding: it is copied on every read) and the record header the
// arenas charge every item (ItemOverhead).
func TestItemLayout(t *testing.T) {
	if item := unsafe.Sizeof(Item{}); item > 64 {
		t.Errorf("Item is %d bytes (want ≤ 64, no padding)", item)
	}
	if hdrLen != hCAS+8 || ItemOverhead != hdrLen+8 {
		t.Errorf("record header %d bytes, ItemOverhead %d", hdrLen, ItemOverhead)
	}
}

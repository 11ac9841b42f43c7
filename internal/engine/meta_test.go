package engine

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/keywaydb/keyway/internal/store"
)

const testEpoch = 1_700_000_000

// newMetaEngine returns an engine over a fresh store whose clock is *now.
func newMetaEngine(t *testing.T) (*Engine, *atomic.Int64) {
	t.Helper()
	now := new(atomic.Int64)
	now.Store(testEpoch)
	st, err := store.Open(store.Options{MemoryLimit: 16 << 20, Now: now.Load})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(st, Options{MaxItemSize: 1024}), now
}

func mustGet(t *testing.T, e *Engine, key string, r MetaGetRequest) MetaGetResult {
	t.Helper()
	res, err := e.MetaGet([]byte(key), r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func mustSet(t *testing.T, e *Engine, key, value string, r StoreRequest) (Status, store.Item) {
	t.Helper()
	st, it, err := e.MetaSet([]byte(key), []byte(value), r)
	if err != nil {
		t.Fatal(err)
	}
	return st, it
}

func TestMetaGetAccess(t *testing.T) {
	e, now := newMetaEngine(t)
	if res := mustGet(t, e, "a", MetaGetRequest{}); res.Found {
		t.Fatal("hit on an empty store")
	}
	mustSet(t, e, "a", "v", StoreRequest{TTL: 100})
	now.Add(5)
	res := mustGet(t, e, "a", MetaGetRequest{NoUpdate: true})
	if !res.Found || res.Item.Fetched || res.Now-res.Item.LastAccess != 5 {
		t.Fatalf("u read: %+v", res)
	}
	res = mustGet(t, e, "a", MetaGetRequest{})
	if res.Item.Fetched || res.Now-res.Item.LastAccess != 5 {
		t.Fatalf("first read must report the state before it: %+v", res)
	}
	res = mustGet(t, e, "a", MetaGetRequest{SetTTL: true, TTL: 30})
	if !res.Item.Fetched || res.Item.LastAccess != res.Now || res.PrevExptime != testEpoch+100 || res.Item.Exptime != testEpoch+5+30 {
		t.Fatalf("second read: %+v", res)
	}
	k := e.Counters()
	if k.CmdGet.Load() != 3 || k.GetHits.Load() != 2 || k.GetMisses.Load() != 1 || k.CmdTouch.Load() != 1 || k.TouchHits.Load() != 1 {
		t.Fatalf("counters: get %d/%d/%d touch %d/%d", k.CmdGet.Load(), k.GetHits.Load(), k.GetMisses.Load(), k.CmdTouch.Load(), k.TouchHits.Load())
	}
}

func TestMetaGetVivifyOneWinner(t *testing.T) {
	e, _ := newMetaEngine(t)
	var wins, tokens atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.MetaGet([]byte("k"), MetaGetRequest{Vivify: true, VivifyTTL: 30})
			if err != nil || !res.Found {
				t.Errorf("vivify: %+v %v", res, err)
			}
			if res.Won {
				wins.Add(1)
			}
			if res.TokenSent {
				tokens.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 || tokens.Load() != 31 {
		t.Fatalf("%d winners, %d told a token is out", wins.Load(), tokens.Load())
	}
	res := mustGet(t, e, "k", MetaGetRequest{})
	if len(res.Item.Value) != 0 || res.Item.Exptime != testEpoch+30 || res.Won || !res.TokenSent {
		t.Fatalf("vivified item: %+v", res)
	}
	// The winner's store makes the item ordinary again.
	if st, _ := mustSet(t, e, "k", "v", StoreRequest{Mode: CAS, CAS: res.Item.CAS}); st != Stored {
		t.Fatalf("recache: %v", st)
	}
	if res := mustGet(t, e, "k", MetaGetRequest{Vivify: true}); res.Won || res.TokenSent || res.Item.Stale || string(res.Item.Value) != "v" {
		t.Fatalf("after recache: %+v", res)
	}
}

func TestMetaGetRecache(t *testing.T) {
	e, now := newMetaEngine(t)
	mustSet(t, e, "a", "v", StoreRequest{TTL: 100})
	if res := mustGet(t, e, "a", MetaGetRequest{Recache: true, RecacheTTL: 30}); res.Won {
		t.Fatal("won with 100s left under R30")
	}
	now.Add(80)
	if res := mustGet(t, e, "a", MetaGetRequest{Recache: true, RecacheTTL: 30}); !res.Won {
		t.Fatal("no win with 20s left under R30")
	}
	if res := mustGet(t, e, "a", MetaGetRequest{Recache: true, RecacheTTL: 30}); res.Won || !res.TokenSent {
		t.Fatalf("second R reader: %+v", res)
	}
}

func TestMetaSetModes(t *testing.T) {
	e, _ := newMetaEngine(t)
	for _, tc := range []struct {
		key, value string
		r          StoreRequest
		want       Status
	}{
		{"a", "1", StoreRequest{Mode: Add}, Stored},
		{"a", "2", StoreRequest{Mode: Add}, NotStored},
		{"b", "x", StoreRequest{Mode: Replace}, NotStored},
		{"b", "x", StoreRequest{Mode: Append}, NotStored},
		{"b", "x", StoreRequest{Mode: Prepend, Vivify: true, VivifyTTL: 10}, Stored},
		{"a", "3", StoreRequest{Mode: Append}, Stored},
		{"a", "0", StoreRequest{Mode: Prepend}, Stored},
		{"c", "x", StoreRequest{Mode: CAS, CAS: 1}, NotFound},
		{"c", "x", StoreRequest{Mode: Add, CAS: 99}, Stored},
		{"c", "y", StoreRequest{Mode: CAS}, Exists},
		{"c", "y", StoreRequest{Mode: Append, CAS: 99}, Exists},
		{"big", string(make([]byte, 1025)), StoreRequest{}, TooLarge},
		{"a", string(make([]byte, 1022)), StoreRequest{Mode: Append}, NotStored},
	} {
		if st, _ := mustSet(t, e, tc.key, tc.value, tc.r); st != tc.want {
			t.Errorf("%s %q %+v: %v, want %v", tc.key, tc.value, tc.r, st, tc.want)
		}
	}
	if res := mustGet(t, e, "a", MetaGetRequest{}); string(res.Item.Value) != "013" {
		t.Errorf("a = %q", res.Item.Value)
	}
	if res := mustGet(t, e, "b", MetaGetRequest{}); res.Item.Exptime != testEpoch+10 {
		t.Errorf("vivified prepend exptime %d", res.Item.Exptime)
	}
	if st, it := mustSet(t, e, "e", "v", StoreRequest{NewCAS: 777}); st != Stored || it.CAS != 777 {
		t.Errorf("E: %v %d", st, it.CAS)
	}
}

func TestMetaInvalidate(t *testing.T) {
	e, _ := newMetaEngine(t)
	_, old := mustSet(t, e, "k", "v1", StoreRequest{TTL: 100})
	if st, err := e.MetaDelete([]byte("k"), DeleteRequest{Invalidate: true, SetTTL: true, TTL: 30}); st != Deleted || err != nil {
		t.Fatalf("md I: %v %v", st, err)
	}
	res := mustGet(t, e, "k", MetaGetRequest{})
	if !res.Item.Stale || !res.Won || res.TokenSent || res.Item.CAS == old.CAS || res.Item.Exptime != testEpoch+30 {
		t.Fatalf("first reader after md I: %+v", res)
	}
	// A writer holding the pre-invalidation CAS stores, but stays stale.
	st, it := mustSet(t, e, "k", "v2", StoreRequest{Mode: CAS, CAS: old.CAS, StaleOK: true, TTL: 500})
	if st != Stored || !it.Stale || !it.WinSent || it.Exptime != testEpoch+30 {
		t.Fatalf("older cas with I: %v %+v", st, it)
	}
	// Without I, or with a newer CAS, it is refused.
	if st, _ := mustSet(t, e, "k", "v3", StoreRequest{Mode: CAS, CAS: old.CAS}); st != Exists {
		t.Fatalf("older cas without I: %v", st)
	}
	if st, _ := mustSet(t, e, "k", "v3", StoreRequest{Mode: CAS, CAS: it.CAS + 1, StaleOK: true}); st != Exists {
		t.Fatalf("newer cas with I: %v", st)
	}
	if st, _ := mustSet(t, e, "k", "v4", StoreRequest{Mode: CAS, CAS: it.CAS}); st != Stored {
		t.Fatalf("matching cas: %v", st)
	}
	if res := mustGet(t, e, "k", MetaGetRequest{}); res.Item.Stale || res.Won || res.TokenSent {
		t.Fatalf("after recache: %+v", res)
	}
	// md with I and E sets the CAS; a plain md removes.
	e.MetaDelete([]byte("k"), DeleteRequest{Invalidate: true, NewCAS: 42})
	if res := mustGet(t, e, "k", MetaGetRequest{}); res.Item.CAS != 42 {
		t.Fatalf("md I E42: cas %d", res.Item.CAS)
	}
	for _, tc := range []struct {
		r    DeleteRequest
		want Status
	}{
		{DeleteRequest{CompareCAS: true, CAS: 41}, Exists},
		{DeleteRequest{CompareCAS: true}, Exists},
		{DeleteRequest{CompareCAS: true, CAS: 42}, Deleted},
		{DeleteRequest{}, NotFound},
	} {
		if st, _ := e.MetaDelete([]byte("k"), tc.r); st != tc.want {
			t.Errorf("md %+v: %v, want %v", tc.r, st, tc.want)
		}
	}
	k := e.Counters()
	if k.DeleteHits.Load() != 1 || k.DeleteMisses.Load() != 3 {
		t.Errorf("delete counters %d/%d", k.DeleteHits.Load(), k.DeleteMisses.Load())
	}
}

func TestMetaArith(t *testing.T) {
	e, _ := newMetaEngine(t)
	do := func(r Arith) ArithResult {
		t.Helper()
		if r.Delta == 0 {
			r.Delta = 1
		}
		res, err := e.MetaArith([]byte("n"), r)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := do(Arith{}); res.Status != NotFound {
		t.Fatalf("miss: %+v", res)
	}
	res := do(Arith{Create: true, CreateTTL: 60, Initial: 10})
	if res.Status != Stored || !res.Created || res.Value != 10 || res.Item.Exptime != testEpoch+60 {
		t.Fatalf("vivify: %+v", res)
	}
	if res := do(Arith{CAS: res.Item.CAS + 1}); res.Status != Exists {
		t.Fatalf("cas mismatch: %+v", res)
	}
	res = do(Arith{Delta: 5, CAS: res.Item.CAS, NewCAS: 900, SetTTL: true, TTL: 5})
	if res.Status != Stored || res.Value != 15 || res.Item.CAS != 900 || res.PrevExptime != testEpoch+60 || res.Item.Exptime != testEpoch+5 {
		t.Fatalf("incr: %+v", res)
	}
	if res := do(Arith{Decr: true, Delta: 20}); res.Value != 0 || string(res.Item.Value) != "0 " {
		t.Fatalf("decr floors at 0 and pads: %+v", res)
	}
	mustSet(t, e, "n", "", StoreRequest{})
	if res := do(Arith{CAS: 12345}); res.Status != NonNumeric {
		t.Fatalf("empty value: %+v", res)
	}
	k := e.Counters()
	if k.IncrHits.Load() != 1 || k.DecrHits.Load() != 1 || k.IncrMisses.Load() != 1 {
		t.Errorf("arith counters %d/%d/%d", k.IncrHits.Load(), k.DecrHits.Load(), k.IncrMisses.Load())
	}
}

// TestClassicCommandsAsMemcached: the classic commands run the routine ms, md
// and ma run, so they answer as memcached 1.6's do_store_item and
// do_add_delta do (checked against memcached by hand): an append past the
// item size is NOT_STORED, an append whose cas names a missing key is
// NOT_STORED, and an incr of a value that is not a number is no miss.
func TestClassicCommandsAsMemcached(t *testing.T) {
	e, _ := newMetaEngine(t)
	store := func(key, value string, r StoreRequest) Status {
		t.Helper()
		st, _, err := e.StoreValue([]byte(key), []byte(value), r)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := store("a", string(make([]byte, 1000)), StoreRequest{}); st != Stored {
		t.Fatalf("set: %v", st)
	}
	if st := store("a", string(make([]byte, 100)), StoreRequest{Mode: Append}); st != NotStored {
		t.Errorf("append past the item size: %v, want NotStored", st)
	}
	if st := store("missing", "x", StoreRequest{Mode: Append, CAS: 5}); st != NotStored {
		t.Errorf("append with a cas on a missing key: %v, want NotStored", st)
	}
	store("empty", "", StoreRequest{})
	res, err := e.IncrDecr([]byte("empty"), Arith{Delta: 1})
	if err != nil || res.Status != NonNumeric {
		t.Fatalf("incr of an empty value: %v %v", res.Status, err)
	}
	if res, _ := e.IncrDecr([]byte("nokey"), Arith{Delta: 1}); res.Status != NotFound {
		t.Fatalf("incr of a missing key: %v", res.Status)
	}
	if hits, misses := e.counters.IncrHits.Load(), e.counters.IncrMisses.Load(); hits != 0 || misses != 1 {
		t.Errorf("incr_hits %d incr_misses %d, want 0 and 1 (memcached counts only the missing key)", hits, misses)
	}
}

// TestIncrReadsValuesAsMemcached: stored values are numbers as memcached's strtoull reads them.
func TestIncrReadsValuesAsMemcached(t *testing.T) {
	e, _ := newMetaEngine(t)
	for _, c := range []struct {
		stored, want string
		ok           bool
	}{
		{" 12", "13 ", true}, {"+5", "6 ", true}, {"0012", "13  ", true}, {"\t3", "4 ", true},
		{"7 trailing", "8         ", true}, {"12a", "", false}, {"-5", "", false}, {"-0", "1 ", true}, {"", "", false},
	} {
		if _, _, err := e.StoreValue([]byte("n"), []byte(c.stored), StoreRequest{}); err != nil {
			t.Fatal(err)
		}
		res, err := e.IncrDecr([]byte("n"), Arith{Delta: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := e.Get([]byte("n"))
		if (res.Status == Stored) != c.ok || c.ok && string(got.Value) != c.want {
			t.Errorf("incr of %q: %v %q, want ok=%v %q", c.stored, res.Status, got.Value, c.ok, c.want)
		}
	}
}

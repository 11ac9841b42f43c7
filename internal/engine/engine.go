// Package engine owns keyway's key-value semantics: the memcached commands
// (get, set/add/replace/append/prepend, cas, incr/decr, touch, delete, flush),
// expiry rules and the counters memcached reports. Doors parse and encode; they
// call the engine and never touch the store directly, so every door sees one truth.
//
// Invariants:
//   - Each command resolves its key once to a key space (the local store or a
//     container's table; see keyspace.go) and runs there; nothing else
//     branches on where a key lives.
//   - A caching container's copies of rows are package rowcache's: the engine
//     serves one only when rowcache.Cache.Held says it may.
//   - Each command on the local store is one store.Update, so it is atomic per key.
//   - The item size limit is checked in one place (refuseTooLarge). The doors
//     still check it too, before reading a value off the wire (text, binary,
//     meta); they call RefuseTooLarge so the refusal's effects stay here.
//   - Exptimes reaching the engine are memcached's wire values; the engine turns
//     them into absolute deadlines (see Deadline) before they reach the store.
//   - A value passed to the engine becomes owned by the store; callers must not
//     reuse its backing array.
package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/validity"
)

// Mode is the kind of storage command.
type Mode uint8

const (
	Set Mode = iota
	Add
	Replace
	Append
	Prepend
	CAS
)

// Status is the outcome of a command, one per memcached reply word.
type Status uint8

const (
	Stored     Status = iota // STORED
	NotStored                // NOT_STORED
	Exists                   // EXISTS: cas mismatch
	NotFound                 // NOT_FOUND
	Deleted                  // DELETED
	Touched                  // TOUCHED
	NonNumeric               // incr/decr on a value that is not a number
	TooLarge                 // value over the item size limit
	NoMemory                 // does not fit under the memory limit
	Failed                   // a server-side failure; see the returned error
)

// maxRelativeExptime is memcached's boundary: larger exptimes are absolute Unix times.
const maxRelativeExptime = 60 * 60 * 24 * 30

// DefaultMaxItemSize is Options.MaxItemSize's default (memcached's -I).
const DefaultMaxItemSize = 1 << 20

// Options configure an Engine.
type Options struct {
	MaxItemSize int64 // largest value accepted, bytes
	// Validity holds the validity state (stamps) of the tables containers map to, shared with the SQL door so its
	// writes invalidate the containers' cached rows. nil = a registry of the engine's own.
	Validity *validity.Registry
	Logger   *slog.Logger // nil = slog.Default()
}

// Engine implements the memcached commands over a store.
type Engine struct {
	st          *store.Store
	maxItemSize int64
	started     time.Time
	counters    Counters

	tables map[string]*Table // containers' tables by name; set before serving (see SetContainers)
	// defaultTable serves keys without "@@" (nil: the local store); see SetContainers.
	defaultTable *Table
	// restoring are the containers a warm restart took copy stamps of (CopyStamp), until CopiesRestored.
	restoreMu sync.Mutex
	restoring []*Table
	validity  *validity.Registry
	log       *slog.Logger

	// flush is the pending delayed truncation of db_only-flush tables. The
	// local store keeps its own deadline (store.FlushAt); tables need a timer.
	// A timer acts only while its gen is current, so a replaced one that
	// fires anyway does nothing; a failed truncation is logged and returned
	// by the next FlushAll.
	flush struct {
		sync.Mutex
		gen   uint64
		timer *time.Timer
		err   error
	}
}

// Counters are memcached's command statistics.
type Counters struct {
	CmdGet, GetHits, GetMisses, GetExpired     atomic.Int64
	CmdSet, CmdTouch, CmdFlush                 atomic.Int64
	TouchHits, TouchMisses                     atomic.Int64
	DeleteHits, DeleteMisses                   atomic.Int64
	IncrHits, IncrMisses, DecrHits, DecrMisses atomic.Int64
	CasHits, CasMisses, CasBadval              atomic.Int64
	// CacheBypasses counts reads of caching containers sent to the table
	// because the binlog follower could not vouch for the cached rows.
	CacheBypasses atomic.Int64
}

// Tally is one connection's count of its gets and sets in plain fields, so a
// request touches no cache line another core writes: the door passes it to
// GetTallied and in StoreRequest.Tally and MetaGetRequest.Tally, and adds it
// to the shared Counters with Publish once per batch of requests (see the
// memcache door's conn.publish). Only its owner's goroutine touches it. The
// other commands, and gets and sets with no Tally, count in Counters directly.
type Tally struct {
	CmdGet, GetHits, GetMisses, CmdSet int64
}

// Publish adds t to the engine's counters and zeroes it. It touches only
// the counters t changes.
func (e *Engine) Publish(t *Tally) {
	if *t == (Tally{}) {
		return
	}
	for _, f := range [...]struct {
		n int64
		c *atomic.Int64
	}{{t.CmdGet, &e.counters.CmdGet}, {t.GetHits, &e.counters.GetHits}, {t.GetMisses, &e.counters.GetMisses}, {t.CmdSet, &e.counters.CmdSet}} {
		if f.n != 0 {
			f.c.Add(f.n)
		}
	}
	*t = Tally{}
}

// countGet counts one get and its hit or miss, in t if there is one.
func (e *Engine) countGet(t *Tally, hit bool) {
	var hits int64
	if hit {
		hits = 1
	}
	e.countGets(t, 1, hits)
}

// countGets counts gets, hits of them and the rest as misses, in t if there is one.
func (e *Engine) countGets(t *Tally, gets, hits int64) {
	if t != nil {
		t.CmdGet += gets
		t.GetHits += hits
		t.GetMisses += gets - hits
		return
	}
	e.counters.CmdGet.Add(gets)
	if hits > 0 {
		e.counters.GetHits.Add(hits)
	}
	if gets > hits {
		e.counters.GetMisses.Add(gets - hits)
	}
}

// New returns an engine over st.
func New(st *store.Store, o Options) *Engine {
	if o.MaxItemSize <= 0 {
		o.MaxItemSize = DefaultMaxItemSize
	}
	if o.Validity == nil {
		o.Validity = validity.NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Engine{st: st, maxItemSize: o.MaxItemSize, started: time.Now(), validity: o.Validity, log: o.Logger}
}

// Counters returns the live command counters.
func (e *Engine) Counters() *Counters { return &e.counters }

// MaxItemSize is the largest value the engine accepts.
func (e *Engine) MaxItemSize() int64 { return e.maxItemSize }

// Started is when the engine was created.
func (e *Engine) Started() time.Time { return e.started }

// Deadline turns a memcached exptime into an absolute Unix time: 0 is never,
// up to 30 days is relative to now, more is already absolute, and a negative
// value is already expired.
func (e *Engine) Deadline(exptime int64) int64 {
	now := e.st.Now()
	switch {
	case exptime == 0:
		return 0
	case exptime < 0:
		return now - 1
	case exptime <= maxRelativeExptime:
		return now + exptime
	default:
		if exptime <= now {
			return now - 1
		}
		return exptime
	}
}

// Get returns the live item for key.
func (e *Engine) Get(key []byte) (store.Item, bool, error) { return e.GetTallied(nil, key, nil) }

// GetTallied is Get counted in t (nil: in the engine's counters). If the answer needs MySQL, w (when not nil) is
// told before the engine waits for it (see Waiter). The key is routed, and a held copy looked up, once.
func (e *Engine) GetTallied(t *Tally, key []byte, w Waiter) (store.Item, bool, error) {
	return e.GetTalliedInto(t, key, w, nil)
}

// GetTalliedInto is GetTallied with the value of an item from the local store copied to memory dst gives (when
// dst is not nil) instead of a slice of its own (store.GetInto): the memcache door gives memory it reuses once
// the replies that refer to its values are written, so a get allocates nothing. Values from elsewhere (a
// container's table) are their own.
func (e *Engine) GetTalliedInto(t *Tally, key []byte, w Waiter, dst store.ValueBuf) (store.Item, bool, error) {
	sp, k, err := e.space(key, classGet)
	if err != nil {
		e.countGet(t, false)
		return store.Item{}, false, err
	}
	return e.getIn(t, sp, k, w, dst)
}

// getIn is Get in a resolved key space, counted in t (nil: the engine's counters), telling w before it waits.
func (e *Engine) getIn(t *Tally, sp keySpace, k []byte, w Waiter, dst store.ValueBuf) (store.Item, bool, error) {
	it, ok, err := sp.get(e, k, w, dst)
	e.countGet(t, ok)
	return it, ok, err
}

// GetAndTouch returns the live item for key after setting its expiry (gat/gats).
func (e *Engine) GetAndTouch(key []byte, exptime int64) (store.Item, bool, error) {
	sp, k, err := e.space(key, classSet)
	if err != nil {
		return store.Item{}, false, err
	}
	return sp.getAndTouch(e, k, exptime)
}

// StoreRequest is one storage command, classic or meta: set, add, replace,
// append, prepend and cas from the text and binary protocols, and ms. As
// memcached hands both to one do_store_item, the doors fill this one shape
// for StoreValue and MetaSet
// (an ms with C in set or replace mode is a CAS, as memcached's ms makes it)
// and one routine per key space runs it.
type StoreRequest struct {
	Mode  Mode // Set, Add, Replace, Append, Prepend, or CAS: a set if CAS matches
	Flags uint32
	TTL   int64 // memcached exptime
	// CAS is the id to compare. Mode CAS: the item's must equal it (0 never
	// does); Append and Prepend: when non-zero, it must; otherwise unused.
	CAS       uint64
	NewCAS    uint64 // ms E: the stored item's CAS id; 0 assigns one
	StaleOK   bool   // ms I: in mode CAS, an id older than the item's stores the value as stale
	Vivify    bool   // ms N: Append and Prepend on a miss store the value
	VivifyTTL int64  // the exptime of an item Vivify creates
	// Tally, when not nil, counts the command instead of the engine's
	// counters (see Tally); the caller publishes it.
	Tally *Tally
}

// metaOnly names the parts of r that act on the local cache's stampede
// handling or compare where a table cannot do it atomically; "" when none.
func (r *StoreRequest) metaOnly() string {
	switch {
	case r.StaleOK || r.NewCAS != 0 || r.Vivify:
		return "ms flags I, E and N"
	case r.CAS != 0 && (r.Mode == Append || r.Mode == Prepend):
		return "appends and prepends with a cas"
	}
	return ""
}

// StoreValue runs a classic storage command. On Stored it returns the new item
// (on a table, what was sent: the row is not read back). value stays the
// caller's: what the engine keeps of it, it copies, so the caller may reuse it
// once StoreValue returns (the memcache door passes its read buffer).
func (e *Engine) StoreValue(key, value []byte, r StoreRequest) (Status, store.Item, error) {
	return e.storeAs(classSet, r.Mode, key, value, r)
}

// MetaSet runs an ms. As memcached's ms does, a value over the size limit
// drops the old one whatever the mode.
func (e *Engine) MetaSet(key, value []byte, r StoreRequest) (Status, store.Item, error) {
	return e.storeAs(classMeta, Set, key, value, r)
}

// storeAs resolves key under class and stores value there; dropMode is the
// mode whose refusal as too large drops the old value (see refuseTooLarge).
func (e *Engine) storeAs(class opClass, dropMode Mode, key, value []byte, r StoreRequest) (Status, store.Item, error) {
	sp, k, err := e.space(key, class)
	if err != nil {
		sp, k = nil, nil
	}
	if e.refuseTooLarge(sp, k, dropMode, int64(len(value))) {
		return TooLarge, store.Item{}, nil
	}
	if r.Tally != nil {
		r.Tally.CmdSet++
	} else {
		e.counters.CmdSet.Add(1)
	}
	if err != nil {
		return Failed, store.Item{}, err
	}
	if _, local := sp.(localSpace); !local {
		// The caller's value may be its read buffer (see StoreValue); a table keeps what it is given (a queued
		// write, a row's copy), so it gets a slice of its own. The local store copies what it keeps.
		value = bytes.Clone(value)
	}
	status, it, err := sp.store(e, k, value, r)
	if r.Mode == CAS {
		e.countCAS(status)
	}
	return status, it, err
}

// RefuseTooLarge records a storage command whose value is over the item size
// limit (a door that refuses it before reading the value). As memcached does,
// a refused set drops the key's old value (a table row's cached copy) so no
// stale copy outlives a write the client attempted.
func (e *Engine) RefuseTooLarge(mode Mode, key []byte) {
	sp, k, _ := e.space(key, classSet)
	e.refuseTooLarge(sp, k, mode, e.maxItemSize+1)
}

// DeleteRequest is one delete, classic or meta (md).
type DeleteRequest struct {
	CompareCAS bool   // delete only the version with CAS (0 never matches)
	CAS        uint64 //
	Invalidate bool   // md I: mark the item stale (with a new CAS id) instead of removing it
	SetTTL     bool   // md T, with I: give the stale item a new exptime
	TTL        int64  //
	NewCAS     uint64 // md E, with I: the stale item's CAS id; 0 assigns one
}

// Delete removes key (classic delete).
func (e *Engine) Delete(key []byte, r DeleteRequest) (Status, error) {
	return e.deleteAs(classDelete, key, r)
}

// MetaDelete removes or invalidates key for md. It returns Deleted (for
// either), NotFound or Exists.
func (e *Engine) MetaDelete(key []byte, r DeleteRequest) (Status, error) {
	return e.deleteAs(classMeta, key, r)
}

func (e *Engine) deleteAs(class opClass, key []byte, r DeleteRequest) (Status, error) {
	sp, k, err := e.space(key, class)
	if err != nil {
		return Failed, err
	}
	status, err := sp.delete(e, k, r)
	e.countDelete(status, r)
	return status, err
}

// countDelete counts a delete's outcome as memcached does: an invalidation
// (md I) is neither a hit nor a miss.
func (e *Engine) countDelete(status Status, r DeleteRequest) {
	switch {
	case status == Failed, status == Deleted && r.Invalidate:
	case status == Deleted:
		e.counters.DeleteHits.Add(1)
	default:
		e.counters.DeleteMisses.Add(1)
	}
}

// countArith counts an incr or decr as memcached does: a hit when it changed
// a number, a miss when the key was missing and not created.
func (e *Engine) countArith(a Arith, res ArithResult) {
	switch {
	case res.Created:
	case res.Status == Stored:
		count(!a.Decr, &e.counters.IncrHits, &e.counters.DecrHits)
	case res.Status == NotFound:
		count(!a.Decr, &e.counters.IncrMisses, &e.counters.DecrMisses)
	}
}

// Touch sets key's expiry.
// It returns the touched item (the binary protocol's reply carries its flags and cas).
func (e *Engine) Touch(key []byte, exptime int64) (store.Item, Status, error) {
	sp, k, err := e.space(key, classSet)
	if err != nil {
		e.counters.CmdTouch.Add(1)
		return store.Item{}, Failed, err
	}
	return e.touchIn(sp, k, exptime)
}

// touchIn is Touch in a resolved key space.
func (e *Engine) touchIn(sp keySpace, k []byte, exptime int64) (store.Item, Status, error) {
	e.counters.CmdTouch.Add(1)
	return sp.touch(e, k, exptime)
}

// Arith is one incr or decr, classic (text, binary) or meta (ma).
type Arith struct {
	Delta     uint64
	Decr      bool
	Create    bool   // on a miss, create the item with Initial (binary, ma N)
	Initial   uint64 //
	CreateTTL int64  // the memcached exptime of a created item
	SetTTL    bool   // ma T: give the item a new exptime
	TTL       int64  //
	CAS       uint64 // when non-zero, must match the item's CAS id
	NewCAS    uint64 // ma E: the changed item's CAS id; 0 assigns one
}

// metaOnly names the parts of a that a table cannot do; "" when none.
func (a *Arith) metaOnly() string {
	if a.CAS != 0 || a.NewCAS != 0 || a.SetTTL {
		return "incr/decr with a cas and ma flags C, E and T"
	}
	return ""
}

// ArithResult is the outcome of an incr or decr.
type ArithResult struct {
	Status      Status // Stored, NotFound, Exists, NonNumeric, NoMemory or Failed
	Value       uint64 // the new number (the initial one when created)
	Item        store.Item
	Created     bool
	PrevExptime int64 // the exptime before this request changed it; 0 when created
	Now         int64 // the engine's clock when the command ran, Unix seconds
}

// IncrDecr adds or subtracts a.Delta as memcached does: a 64-bit unsigned
// value that wraps on incr and stops at 0 on decr. When the new number is
// shorter than the old value it is padded with spaces, as memcached does in place.
func (e *Engine) IncrDecr(key []byte, a Arith) (ArithResult, error) {
	return e.arithAs(classSet, key, a)
}

// MetaArith is ma: IncrDecr resolved as a meta command.
func (e *Engine) MetaArith(key []byte, a Arith) (ArithResult, error) {
	return e.arithAs(classMeta, key, a)
}

func (e *Engine) arithAs(class opClass, key []byte, a Arith) (ArithResult, error) {
	res := ArithResult{Status: Stored, Now: e.st.Now()}
	sp, k, err := e.space(key, class)
	if err != nil {
		res.Status = Failed
		return res, err
	}
	res, err = sp.incrDecr(e, k, a, res)
	e.countArith(a, res)
	return res, err
}

// joinValues is the value of an append (mode Append) or prepend of add to old.
func joinValues(mode Mode, old, add []byte) []byte {
	joined := make([]byte, 0, len(old)+len(add))
	if mode == Append {
		return append(append(joined, old...), add...)
	}
	return append(append(joined, add...), old...)
}

// addDelta applies an incr (or, with decr, a decr) of delta to the counter
// value old as memcached does: a 64-bit unsigned number that wraps on incr and
// stops at 0 on decr. The new value is padded with spaces to the old length,
// as memcached does in place. ok is false when old is not a number.
func addDelta(old []byte, delta uint64, decr bool) (value []byte, n uint64, ok bool) {
	n, ok = ParseUint64(old)
	if !ok {
		return nil, 0, false
	}
	switch {
	case !decr:
		n += delta
	case delta > n:
		n = 0
	default:
		n -= delta
	}
	value = strconv.AppendUint(make([]byte, 0, max(len(old), 20)), n, 10)
	for len(value) < len(old) {
		value = append(value, ' ')
	}
	return value, n, true
}

// Numbers are read as memcached's safe_strto* read them over C's strtol/strtoull, base 10: blanks before, an
// optional sign, digits, then the end or a blank (what follows is ignored); out of the 64-bit range fails. The
// memcache door reads command arguments with these, and incr/decr read stored values with ParseUint64, so
// " 12", "+5" and "0012" are numbers both ways, as in memcached.

// ParseDecimal reads the sign and magnitude of a decimal number.
func ParseDecimal(b []byte) (neg bool, mag uint64, ok bool) {
	i := 0
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		d := uint64(b[i] - '0')
		if mag > (1<<64-1-d)/10 {
			return false, 0, false
		}
		mag = mag*10 + d
	}
	if i == start || i < len(b) && !isBlank(b[i]) {
		return false, 0, false
	}
	return neg, mag, true
}

// ParseUint64 is safe_strtoull: a '-' is accepted only when the (wrapped) result is below 2^63, so "-0" is 0 and
// "-5" fails.
func ParseUint64(b []byte) (uint64, bool) {
	neg, mag, ok := ParseDecimal(b)
	if !ok {
		return 0, false
	}
	if neg {
		mag = -mag // strtoull negates in the unsigned type
		if int64(mag) < 0 {
			return 0, false
		}
	}
	return mag, true
}

// isBlank is C's isspace.
func isBlank(b byte) bool { return b == ' ' || b >= '\t' && b <= '\r' }

// FlushAll is memcached's flush_all: with delay <= 0 it removes every item
// now; otherwise every item stored (or fetched) before the deadline is gone
// once it comes, including items set in between, and a later flush_all
// replaces the pending one (memcached's single oldest_live). A delay over 30
// days is an absolute Unix time, like an exptime.
//
// Containers whose flush policy is db_only have their tables truncated, now or
// at the deadline (only those). A truncation that fails at the deadline is
// logged and its error returned by the next FlushAll. On a failed disk the
// flush is refused and changes nothing.
func (e *Engine) FlushAll(delay int64) error {
	e.counters.CmdFlush.Add(1)
	e.flush.Lock()
	defer e.flush.Unlock()
	at := e.st.Now()
	if delay > 0 {
		at = e.Deadline(delay)
	}
	if at <= e.st.Now() {
		e.stopFlushTimerLocked()
		err := errors.Join(e.flush.err, e.truncateTables(), e.st.FlushAll())
		e.flush.err = nil
		return err
	}
	if err := e.st.FlushAt(at); err != nil {
		return err
	}
	e.stopFlushTimerLocked()
	err := e.flush.err
	e.flush.err = nil
	if e.hasFlushTables() {
		gen := e.flush.gen
		e.flush.timer = time.AfterFunc(time.Duration(at-e.st.Now())*time.Second, func() { e.flushTablesAt(gen) })
	}
	return err
}

// stopFlushTimerLocked cancels the pending table truncation; a timer that has
// fired already finds its generation stale and does nothing.
func (e *Engine) stopFlushTimerLocked() {
	e.flush.gen++
	if e.flush.timer != nil {
		e.flush.timer.Stop()
		e.flush.timer = nil
	}
}

// flushTablesAt truncates the db_only-flush tables for the delayed flush of
// generation gen, unless a later flush_all has replaced it.
func (e *Engine) flushTablesAt(gen uint64) {
	e.flush.Lock()
	defer e.flush.Unlock()
	if gen != e.flush.gen {
		return
	}
	e.flush.timer = nil
	if err := e.truncateTables(); err != nil {
		e.log.Error("engine: delayed flush_all could not truncate tables; the next flush_all reports it", "err", err)
		e.flush.err = errors.Join(e.flush.err, err)
	}
}

func (e *Engine) hasFlushTables() bool {
	for _, t := range e.tables {
		if t.Policies.Flush == container.DBOnly {
			return true
		}
	}
	return false
}

// truncateTables truncates the tables of containers whose flush policy is
// db_only (and only those).
func (e *Engine) truncateTables() error {
	var errs []error
	for _, t := range e.tables {
		if t.Policies.Flush != container.DBOnly {
			continue
		}
		if t.Behind != nil {
			// Sets acknowledged before the flush are flushed with it, not after.
			if err := t.Behind.Drain(); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), tableTimeout)
		if err := t.C.Truncate(ctx); err != nil {
			errs = append(errs, fmt.Errorf("container %q: truncate: %w", t.Name, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// countCAS counts the outcome of a compare-and-swap as memcached does.
func (e *Engine) countCAS(status Status) {
	switch status {
	case Stored:
		e.counters.CasHits.Add(1)
	case Exists:
		e.counters.CasBadval.Add(1)
	case NotFound:
		e.counters.CasMisses.Add(1)
	}
}

func storeErrorStatus(err error) Status {
	if errors.Is(err, store.ErrNoMemory) {
		return NoMemory
	}
	return Failed
}

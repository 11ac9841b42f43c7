package sqlproxy

// This file holds the steps a statement goes through in a session, made explicit so the cache, replicas and
// shards each have one place to land:
//
//  1. plan     — PlanCache.Plan: class, tables, cacheability and the key a point statement names, once per digest.
//  2. route    — session.route: where the statement goes, from the plan and the session's pin state: the result
//                cache (cache.go) or the session's own backend connection; next a replica or a shard.
//  3. exchange — session.exchange(command, plan, relay, sink): settle the tables the plan names, send, relay the
//                reply, invalidate what the plan wrote before the client sees the reply.
//  4. sink     — where the reply goes: the client, or nowhere (a reply the client must not see); a cache fill
//                also keeps a bounded copy (mysqlwire.Conn.StartCapture).
//
// Pin state: a session whose backend connection holds state the statement may depend on (an open transaction,
// session variables, temporary tables, locks, user variables, PREPAREd statements… pinTable below lists every
// reason, what sets it and what ends it) is pinned to that connection: nothing it runs is answered from the
// result cache, and freshBackend never swaps its connection for a fresh one. Plan.Pins and Plan.Unpins say what
// each statement does, once per digest; the pin state lives on the session.

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/stats"
	"github.com/keywaydb/keyway/internal/validity"
)

// PinReason is one reason a session must keep its backend connection: state on that connection that another
// connection would not have (or a lock another would not hold). pinTable below is the one place that says which
// statement sets each, why it pins and what ends it; /metrics' "pinned sessions by reason" will count these.
type PinReason uint8

const (
	PinTransaction    PinReason = iota // the backend's status flags say a transaction is open
	PinAutocommitOff                   // the backend's status flags say autocommit is off
	PinSetTransaction                  // SET TRANSACTION …
	PinVariable                        // SET of a session variable keyway does not carry (backend.State)
	PinSessionState                    // the server reported a state change it names no variable for
	PinUserVariable                    // SET @v, SELECT @v := …, SELECT … INTO @v
	PinLastInsertID                    // LAST_INSERT_ID(expr)
	PinTemporaryTable                  // CREATE/DROP TEMPORARY TABLE
	PinTableLock                       // LOCK TABLES, FLUSH TABLES t FOR EXPORT
	PinGlobalReadLock                  // FLUSH TABLES [t] WITH READ LOCK
	PinHandler                         // HANDLER t OPEN/READ/CLOSE
	PinUserLock                        // GET_LOCK()
	PinPrepare                         // PREPARE / EXECUTE / DEALLOCATE PREPARE (SQL-level prepared statements)
	PinSequence                        // NEXTVAL, NEXT VALUE FOR, LASTVAL, PREVIOUS VALUE FOR, SETVAL
	PinConnectionID                    // CONNECTION_ID()
	PinLongData                        // COM_STMT_SEND_LONG_DATA
	PinCursor                          // COM_STMT_EXECUTE that opens a cursor, COM_STMT_FETCH
	numPinReasons
)

// pinTable: which statement pins a session, why, and what unpins it. Every reason also ends when the session
// ends, at COM_RESET_CONNECTION and at COM_CHANGE_USER (the backend connection is reset or replaced). Statement
// pins are found once per digest by PlanCache.build (classify, pinFinder; guessOne for statements the parser
// rejects: SELECT … INTO @v, HANDLER, PREVIOUS VALUE FOR, FLUSH … FOR EXPORT), never by a parse per query.
var pinTable = [numPinReasons]struct {
	name string // short name, for logs and metrics
	why  string // what pinned() reports
	ends string // what unpins it, besides reset/change user/end of session
}{
	PinTransaction:    {"transaction", "inside a transaction", "COMMIT / ROLLBACK (read from the status flags)"},
	PinAutocommitOff:  {"autocommit_off", "autocommit is off", "SET autocommit = 1 (read from the status flags)"},
	PinSetTransaction: {"set_transaction", "SET TRANSACTION set the next transaction's characteristics", "kept: SET SESSION TRANSACTION lasts"},
	PinVariable:       {"variable", "a session variable keyway does not carry was SET (the server reported it)", "kept (SET GLOBAL does not pin; see backend's trackedVars for those carried)"},
	PinSessionState:   {"session_state", "the server reported a change of session state that keyway cannot carry (user variables, temporary tables, PREPARE…)", "kept"},
	PinUserVariable:   {"user_variable", "a user variable was set (SET @v, @v := …, SELECT … INTO @v)", "kept"},
	PinLastInsertID:   {"last_insert_id", "LAST_INSERT_ID(expr) set the session's value where keyway does not see it", "kept"},
	PinTemporaryTable: {"temporary_table", "temporary tables", "kept (DROP TEMPORARY TABLE may leave others)"},
	PinTableLock:      {"table_lock", "LOCK TABLES holds table locks", "UNLOCK TABLES"},
	PinGlobalReadLock: {"global_read_lock", "FLUSH TABLES WITH READ LOCK holds the read lock", "UNLOCK TABLES"},
	PinHandler:        {"handler", "HANDLER opened a table", "kept (HANDLER … CLOSE may leave others open)"},
	PinUserLock:       {"user_lock", "GET_LOCK() may hold a named lock", "RELEASE_ALL_LOCKS(); RELEASE_LOCK() keeps it: keyway does not count which locks are held"},
	PinPrepare:        {"prepare", "server-side PREPARE", "kept (DEALLOCATE may leave others)"},
	PinSequence:       {"sequence", "a sequence's last value (LASTVAL / PREVIOUS VALUE FOR) belongs to the connection", "kept"},
	PinConnectionID:   {"connection_id", "CONNECTION_ID() named the backend connection", "kept"},
	PinLongData:       {"long_data", "COM_STMT_SEND_LONG_DATA parameters wait for their execute", "COM_STMT_EXECUTE, COM_STMT_RESET or COM_STMT_CLOSE of that statement"},
	PinCursor:         {"cursor", "a cursor is open (COM_STMT_FETCH reads it)", "the statement's next execute without a cursor, COM_STMT_RESET or COM_STMT_CLOSE"},
}

// String is the reason's short name.
func (r PinReason) String() string {
	if r < numPinReasons {
		return pinTable[r].name
	}
	return "pin(" + strconv.Itoa(int(r)) + ")"
}

// PinSet is a set of PinReasons.
type PinSet uint32

func pinSet(rs ...PinReason) PinSet {
	var s PinSet
	for _, r := range rs {
		s |= 1 << r
	}
	return s
}

// Has reports whether r is in s.
func (s PinSet) Has(r PinReason) bool { return s&(1<<r) != 0 }

// Reasons lists s in pinTable order.
func (s PinSet) Reasons() []PinReason {
	var rs []PinReason
	for r := PinReason(0); r < numPinReasons; r++ {
		if s.Has(r) {
			rs = append(rs, r)
		}
	}
	return rs
}

// String is the reasons' names, comma-separated ("" for none).
func (s PinSet) String() string {
	var b strings.Builder
	for _, r := range s.Reasons() {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.String())
	}
	return b.String()
}

// pinState is the session state, beyond the backend's own status flags, that ties a session to its backend
// connection: the reasons its statements and COM_STMT_* commands set (pinTable).
type pinState struct {
	set PinSet
}

// note updates the pin state after plan ran (failed: the server refused it, or one statement of a multi-statement).
// A failed multi-statement still pins: its statements before the failing one ran.
func (p *pinState) note(plan *Plan, failed bool) {
	if plan == nil || (failed && !plan.multi) {
		return
	}
	if !failed {
		p.set &^= plan.Unpins
	}
	p.set |= plan.Pins
}

// pins returns every reason the session is pinned now: the status flags' and pinState's.
func (ss *session) pins() PinSet {
	s := ss.pin.set
	st := ss.status
	if ss.be != nil {
		st = ss.be.Status
	}
	if st&mysqlwire.StatusInTrans != 0 {
		s |= pinSet(PinTransaction)
	} else if st&mysqlwire.StatusAutocommit == 0 {
		s |= pinSet(PinAutocommitOff)
	}
	return s
}

// connectionPins are the reasons that tie a session to a statement's state on its connection (long data, a cursor),
// not to state a reply depends on: the result cache still answers such a session.
const connectionPins = PinSet(1<<PinLongData | 1<<PinCursor)

// pinned reports whether the session's statements must stay on its backend connection, and why (the first reason
// in pinTable order). A transaction is read from the backend's own status flags after the last reply (in a
// transaction, or autocommit off so the next statement opens one), which no statement text can hide.
func (ss *session) pinned() (bool, string) {
	s := ss.pins()
	if s == 0 {
		return false, ""
	}
	return true, pinTable[s.Reasons()[0]].why
}

// pinCounts counts the pinned sessions by group and reason, for /metrics: a session publishes its pins after each
// command when they changed (publishPins) and takes them back when it ends.
type pinCounts struct {
	mu sync.Mutex
	n  map[string]*[numPinReasons]int
}

func (c *pinCounts) change(group string, from, to PinSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]*[numPinReasons]int)
	}
	n := c.n[group]
	if n == nil {
		n = new([numPinReasons]int)
		c.n[group] = n
	}
	for r := PinReason(0); r < numPinReasons; r++ {
		if from.Has(r) {
			n[r]--
		}
		if to.Has(r) {
			n[r]++
		}
	}
}

func (c *pinCounts) stats() []stats.PinnedStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []stats.PinnedStat
	for g, n := range c.n {
		for r, k := range n {
			out = append(out, stats.PinnedStat{Group: g, Reason: PinReason(r).String(), Sessions: k})
		}
	}
	return out
}

// publishPins updates the server's pinned-session counts with the session's pins now (none once it ended).
func (ss *session) publishPins(ended bool) {
	var now PinSet
	group := ""
	if !ended && ss.user != nil {
		now, group = ss.pins(), ss.user.group.Name()
	}
	if now == ss.published.set && group == ss.published.group {
		return
	}
	if ss.published.set != 0 {
		ss.s.pinned.change(ss.published.group, ss.published.set, 0)
	}
	if now != 0 {
		ss.s.pinned.change(group, 0, now)
	}
	ss.published.set, ss.published.group = now, group
}

// notePreparedPins recomputes the pins COM_STMT_* commands set (long data, cursors) from the session's prepared
// statements; called only when one of their flags changed, so an ordinary execute does not scan them.
func (ss *session) notePreparedPins() {
	ss.pin.set &^= pinSet(PinLongData, PinCursor)
	for _, st := range ss.stmts {
		if st.longData {
			ss.pin.set |= pinSet(PinLongData)
		}
		if st.cursor {
			ss.pin.set |= pinSet(PinCursor)
		}
	}
}

// target is where route sends a statement.
type target uint8

const (
	// toSession: the session's own backend connection.
	toSession target = iota
	// toCache: the result cache answers, or the session's connection does and its reply fills the cache
	// (cache.go).
	toCache
)

// route picks the statement's target: the result cache for a cacheable read of an unpinned session while the
// binlog followers vouch for freshness, else the session's backend connection. Replicas come here next. Point
// selects (one equality on one column of one table) are cached without configuration; h, the statement's own
// hint, can ask for any cacheable read to be cached, or for none.
func (ss *session) route(plan *Plan, h hint) target {
	c := ss.s.opts.Cache
	if c == nil || plan == nil || !plan.Cacheable || h.nocache || (plan.Key == nil && !h.cache) {
		return toSession
	}
	if ss.pins()&^connectionPins != 0 {
		c.Bypassed(qcache.Pinned)
		return toSession
	}
	if gate, ok := ss.gate(); !ok || !c.Usable(gate) {
		c.Bypassed(qcache.NotFresh)
		return toSession
	}
	return toCache
}

// hint is what a statement's "/*+ keyway … */" comment asks of the cache: "nocache", or "cache" with an optional
// "ttl=N" (seconds) after which the entry is dropped even if nothing invalidated it.
type hint struct {
	nocache, cache bool
	ttl            time.Duration
}

// CacheRule is a [[cache.rules]] entry: reads it matches are cached as if they carried /*+ keyway cache */, with
// TTL as their ttl. Exactly one of Digest, Table and Regex is set.
type CacheRule struct {
	Digest string
	Table  validity.TableID // Schema "" matches the name in every schema
	Regex  *regexp.Regexp   // matched against the normalized statement
	TTL    time.Duration
}

// hintFor is the cache hint of a statement: its own "/*+ keyway … */" comment, else the first rule that matches
// it. Digest and regex rules are decided once per fingerprint; table rules per statement, since the default database
// decides what an unqualified name means.
func (ss *session) hintFor(sql string, plan *Plan) hint {
	h := hintOf(sql)
	rules := *ss.s.rules.Load()
	if h.cache || h.nocache || len(rules) == 0 || plan == nil || !plan.Cacheable {
		return h
	}
	for i := range rules {
		r := &rules[i]
		var match bool
		switch {
		case r.Digest != "":
			match = r.Digest == plan.Digest
		case r.Regex != nil:
			v, ok := ss.s.regexMatches.Load(regexKey{r.Regex, plan.Fingerprint})
			if !ok {
				v = r.Regex.MatchString(plan.Normalized)
				if ss.s.regexCount.Add(1) > maxRegexMemo { // forget, rather than grow with every digest ever seen
					ss.s.regexMatches.Clear()
					ss.s.regexCount.Store(0)
				}
				ss.s.regexMatches.Store(regexKey{r.Regex, plan.Fingerprint}, v)
			}
			match = v.(bool)
		default:
			for _, id := range plan.TableIDs(ss.db) {
				match = match || id.Name == r.Table.Name && (r.Table.Schema == "" || r.Table.Schema == id.Schema)
			}
		}
		if match {
			return hint{cache: true, ttl: r.TTL}
		}
	}
	return h
}

// maxRegexMemo bounds the memoized regex verdicts.
const maxRegexMemo = 1 << 16

// regexKey memoizes a regex rule's verdict on a statement's normalized text, found by its fingerprint.
type regexKey struct {
	rule        *regexp.Regexp // the rule's own, so a verdict never outlives its rule (SetCacheRules)
	fingerprint uint64
}

// hintOf reads the keyway hint of sql, if any. The digest erases comments, so this is read per statement text;
// it costs one substring search for statements without "/*+".
func hintOf(sql string) hint {
	var h hint
	i := strings.Index(sql, "/*+")
	if i < 0 {
		return h
	}
	body, _, ok := strings.Cut(sql[i+3:], "*/")
	if !ok {
		return h
	}
	f := strings.Fields(strings.ToLower(body))
	if len(f) < 2 || f[0] != "keyway" {
		return h
	}
	switch f[1] {
	case "nocache":
		h.nocache = true
	case "cache":
		h.cache = true
		for _, a := range f[2:] {
			if v, ok := strings.CutPrefix(a, "ttl="); ok {
				if n, err := strconv.Atoi(v); err == nil && n > 0 {
					h.ttl = time.Duration(n) * time.Second
				}
			}
		}
	}
	return h
}

// sink is where a relayed reply goes.
type sink uint8

const (
	toClient sink = iota // the client
	discard              // nowhere: the client must not see it (a refused LOCAL INFILE's leftovers)
)

// conn is the client connection a sink writes to, nil for discard.
func (s sink) conn(ss *session) *mysqlwire.Conn {
	if s == toClient {
		return ss.c
	}
	return nil
}

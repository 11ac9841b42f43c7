package sqlproxy

// The result cache's place in a session (route picked toCache; see pipeline.go and package qcache): a hit is
// replayed to the client with the client's sequence ids and never reaches the backend; a miss goes to the
// session's backend connection as any statement does, with a bounded copy of the reply kept, and stored if the
// statement succeeded, left the session unpinned, and no table it read changed meanwhile.
//
// The key holds everything the reply bytes depend on: the statement text (or the prepared statement's text,
// parameter types and values), the default database, the user (privileges), the connection's collation
// (character_set_results) and the negotiated capabilities (CLIENT_DEPRECATE_EOF changes the framing). Session
// state that changes results (SET time_zone, sql_mode, …) pins the session, so it never reaches the cache.

import (
	"encoding/binary"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/qcache"
)

// cacheKey builds the key of a statement: kind 'Q' for text, 'E' for a prepared statement's execute.
func (ss *session) cacheKey(kind byte, text string, params []byte) string {
	var b strings.Builder
	b.Grow(len(ss.hs.User) + len(ss.db) + len(text) + len(params) + 8)
	caps := ss.c.Capabilities // the negotiated flags: CLIENT_DEPRECATE_EOF and the like change the reply's framing
	b.WriteByte(kind)
	b.WriteByte(ss.hs.Collation)
	b.Write([]byte{byte(caps), byte(caps >> 8), byte(caps >> 16), byte(caps >> 24)})
	b.WriteString(ss.hs.User)
	b.WriteByte(0)
	b.WriteString(ss.db)
	b.WriteByte(0)
	b.WriteString(text)
	b.WriteByte(0)
	b.Write(params)
	return b.String()
}

// fillWait bounds how long a miss waits for another session's fill of the same key before it runs the
// statement itself.
const fillWait = time.Second

// throughCache answers from the result cache, or runs p on the backend (with send, the packet as the backend
// must get it) and fills the cache with the reply. Concurrent misses of one key wait for one fill.
func (ss *session) throughCache(p []byte, plan *Plan, key string, ttl time.Duration, relay func() (int64, bool, error), send func([]byte) []byte) (int64, bool, error) {
	c := ss.s.opts.Cache
	if ttl == 0 {
		ttl = ss.s.opts.TTLOnly[ss.user.group.Name()] // 0 for a group the binlog follower watches: no expiry
	}
	if rows, hit, err := ss.replayCached(key); hit {
		return rows, false, err
	}
	leader, wait := c.Lead(key)
	if leader {
		defer c.Done(key)
	} else {
		select {
		case <-wait:
			if rows, hit, err := ss.replayCached(key); hit {
				return rows, false, err
			}
		case <-time.After(fillWait):
		}
	}
	return ss.fillingExchange(send(p), plan, key, ttl, relay)
}

// replayCached answers from the result cache when a valid entry is under key; hit is false otherwise.
func (ss *session) replayCached(key string) (rows int64, hit bool, err error) {
	reply, rows, ok := ss.s.opts.Cache.Get(key)
	if !ok {
		return 0, false, nil
	}
	if err := ss.c.WriteCaptured(reply); err != nil {
		return rows, true, err
	}
	return rows, true, ss.c.Flush()
}

// fillingExchange is exchange for a cache miss: the statement runs on the backend, and its reply fills the entry
// under key if it succeeded without warnings, the session stays unpinned, and no table it read changed meanwhile.
func (ss *session) fillingExchange(p []byte, plan *Plan, key string, ttl time.Duration, relay func() (int64, bool, error)) (int64, bool, error) {
	ids := plan.TableIDs(ss.db)
	for _, id := range ids {
		if id.Schema == "" { // no default database: the server refuses it, and there is no table to depend on
			return ss.exchange(p, plan, relay, toClient)
		}
	}
	c := ss.s.opts.Cache
	deps := c.Begin(ids)
	ss.be.StartCapture(qcache.MaxReply)
	rows, failed, err := ss.exchange(p, plan, relay, toClient)
	reply, kept := ss.be.StopCapture()
	if err == nil && !failed && kept && !ss.warned {
		if pinned, _ := ss.pinned(); !pinned {
			c.Put(key, reply, rows, deps, ttl)
		}
	}
	return rows, failed, err
}

// queryThroughCache runs a COM_QUERY that route sent to the cache; ttl, when not 0, bounds the entry's life.
func (ss *session) queryThroughCache(p []byte, plan *Plan, ttl time.Duration, start time.Time) error {
	key := ss.cacheKey('Q', string(p[1:]), nil)
	rows, failed, err := ss.throughCache(p, plan, key, ttl, ss.relayQueryResults, func(p []byte) []byte { return p })
	ss.record(plan, rows, time.Since(start), failed || err != nil)
	return err
}

// paramsAt locates the parameter part of a COM_STMT_EXECUTE of st: cmd(1) id(4) flags(1) iterations(4), then
// the null bitmap, the new-params-bound flag, [types], values. ok is false for a statement without parameters
// or a packet too short to hold them.
func paramsAt(st *prepared, p []byte) (nulls []byte, bound bool, types, values []byte, ok bool) {
	nb := (st.params + 7) / 8
	if st.params == 0 || len(p) < 10+nb+1 {
		return nil, false, nil, nil, false
	}
	nulls, rest := p[10:10+nb], p[10+nb:]
	if bound = rest[0] == 1; bound {
		if len(rest) < 1+2*st.params {
			return nil, false, nil, nil, false
		}
		return nulls, true, rest[1 : 1+2*st.params], rest[1+2*st.params:], true
	}
	return nulls, false, nil, rest[1:], true
}

// noteTypes records the parameter types an execute binds, for later executes that omit them (see forBackend).
func (st *prepared) noteTypes(p []byte) {
	if _, bound, types, _, ok := paramsAt(st, p); ok && bound {
		st.types = append(st.types[:0], types...)
	}
}

// executeParams returns the part of a COM_STMT_EXECUTE (p, its statement id already checked) that, with the
// statement's text, determines its reply: null bitmap, parameter types and values. ok is false for an execute
// the cache must not answer: a cursor, several iterations, long data, or types never bound.
func executeParams(st *prepared, p []byte) (params []byte, ok bool) {
	if len(p) < 10 || p[5] != 0 || binary.LittleEndian.Uint32(p[6:]) != 1 || st.longData {
		return nil, false
	}
	if st.params == 0 {
		return nil, true
	}
	nulls, _, _, values, ok := paramsAt(st, p)
	if !ok || st.types == nil {
		return nil, false
	}
	params = make([]byte, 0, len(nulls)+len(st.types)+len(values))
	return append(append(append(params, nulls...), st.types...), values...), true
}

// forBackend returns the execute p as the backend must get it. A client binds parameter types once (the first
// execute) and omits them after; when the execute that carried them was answered from the cache, the backend has
// never seen them, and the first execute it does see gets them added (new-params-bound set, types inserted).
func (st *prepared) forBackend(p []byte) []byte {
	if st.params == 0 {
		return p
	}
	off := 10 + (st.params+7)/8 // cmd, id, flags, iterations, null bitmap: then the new-params-bound flag
	switch {
	case len(p) <= off:
		return p
	case p[off] == 1:
		st.backendTyped = true
		return p
	case st.backendTyped || st.types == nil:
		return p
	}
	q := make([]byte, 0, len(p)+len(st.types))
	q = append(append(append(append(q, p[:off]...), 1), st.types...), p[off+1:]...)
	st.backendTyped = true
	return q
}

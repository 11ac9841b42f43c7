package sqlproxy

// The result cache's place in a session (route picked toCache; see pipeline.go and package qcache): a hit is
// replayed to the client with the client's sequence ids and never reaches the backend; a miss goes to the
// session's backend connection as any statement does, with a bounded copy of the reply kept, and stored if the
// statement succeeded, left the session unpinned, and no table it read changed meanwhile.
//
// A point select on an integer key value (a literal in the text, or an integer parameter) depends on that row
// only, and one on an IN list of them on those rows (qcache.BeginKeys): the values are read on a miss (keySource)
// and the entry survives changes of other rows.
//
// The key holds everything the reply bytes depend on: the statement text (or the prepared statement's text,
// parameter types and values), the default database, the user (privileges), the handshake's collation, the
// negotiated capabilities (CLIENT_DEPRECATE_EOF changes the framing), and the session variables keyway carries
// that change a reply (backend.ResultVars: character sets and collations, sql_mode, time_zone…). Session state
// keyway does not carry pins the session, so it never reaches the cache.

import (
	"encoding/binary"
	"time"

	"github.com/pingcap/tidb/pkg/parser/mysql"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/qcache"
)

// cacheKey builds the key of a statement in the session's key buffer: kind 'Q' for text, 'E' for a prepared
// statement's execute, whose parameters (null bitmap, types, values) come last. The key is valid until the
// session's next cacheKey; a hit looks it up without copying it.
func (ss *session) cacheKey(kind byte, text string, params ...[]byte) []byte {
	group := ss.user.group.Name()
	st := &ss.state
	if ss.be != nil {
		st = &ss.be.State
	}
	// The negotiated flags that change the reply's framing (CLIENT_DEPRECATE_EOF, MariaDB's metadata cache…), and
	// only those: whether TLS or CLIENT_MYSQL was negotiated makes no difference to a reply.
	caps, ext := ss.c.Capabilities&mysqlwire.ProtocolCaps, ss.c.ExtCapabilities
	b := append(ss.keyBuf[:0], kind, ss.hs.Collation)
	b = binary.LittleEndian.AppendUint32(b, caps)
	b = binary.LittleEndian.AppendUint32(b, ext)
	b = append(append(b, ss.hs.User...), 0)
	// The group the reply was read from: a reload can move a user to another group, whose tables are others.
	b = append(append(b, group...), 0)
	b = append(append(b, ss.db...), 0)
	for _, i := range backend.ResultVars {
		b = append(append(b, st.Vars[i]...), 0)
	}
	b = append(append(b, st.ResultsCollation...), 0) // the column definitions' character set
	b = append(append(b, text...), 0)
	for _, p := range params {
		b = append(b, p...)
	}
	ss.keyBuf = b
	return b
}

// fillWait bounds how long a miss waits for another session's fill of the same key before it runs the
// statement itself.
const fillWait = time.Second

// throughCache answers from the result cache, or runs p on the backend (with send, the packet as the backend
// must get it) and fills the cache with the reply. Concurrent misses of one key wait for one fill.
func (ss *session) throughCache(p []byte, plan *Plan, st *prepared, keyBuf []byte, ks keySource, ttl time.Duration, fn func(relay) (int64, bool, error)) (int64, bool, error) {
	c := ss.s.opts.Cache
	if ttl == 0 {
		ttl = ss.s.opts.TTLOnly[ss.user.group.Name()] // 0 for a group the binlog follower watches: no expiry
	}
	if rows, hit, err := ss.replayCached(keyBuf); hit {
		return rows, false, err
	}
	key := string(keyBuf) // a miss: the fill keeps the key
	leader, wait := c.Lead(key)
	if leader {
		defer c.Done(key)
	} else {
		select {
		case <-wait:
			if rows, hit, err := ss.replayCached(keyBuf); hit {
				return rows, false, err
			}
		case <-time.After(fillWait):
		}
	}
	return ss.fillingExchange(p, plan, st, key, ks, ttl, fn)
}

// maxReplyBuf is the largest reply buffer a session keeps between hits: a larger reply's is let go, so thousands
// of idle sessions hold at most 16 KiB each for it.
const maxReplyBuf = 16 << 10

// replayCached answers from the result cache when a valid entry is under key; hit is false otherwise. The reply
// is copied out of the cache to the session's reply buffer, so a hit allocates nothing.
func (ss *session) replayCached(key []byte) (rows int64, hit bool, err error) {
	gate, _ := ss.gate()
	reply, rows, ok := ss.s.opts.Cache.Get(gate, key, ss.replyBuf[:0])
	if !ok {
		return 0, false, nil
	}
	if ss.replyBuf = reply[:0]; cap(reply) > maxReplyBuf {
		ss.replyBuf = nil
	}
	if err := ss.c.WriteCaptured(reply); err != nil {
		return rows, true, err
	}
	return rows, true, ss.c.Flush()
}

// fillingExchange is exchange for a cache miss: the statement runs on the backend, and its reply fills the entry
// under key if it succeeded without warnings, the session stays unpinned, and no table it read changed meanwhile.
func (ss *session) fillingExchange(p []byte, plan *Plan, st *prepared, key string, ks keySource, ttl time.Duration, fn func(relay) (int64, bool, error)) (int64, bool, error) {
	ids := plan.TableIDs(ss.db)
	for _, id := range ids {
		if id.Schema == "" { // no default database: the server refuses it, and there is no table to depend on
			return ss.exchange(p, plan, st, fn, toClient)
		}
	}
	c := ss.s.opts.Cache
	if ttl == 0 && !c.Trusted(ids) { // a view: no invalidation would reach the reply, and it has no ttl
		c.Bypassed(qcache.Untrusted)
		return ss.exchange(p, plan, st, fn, toClient)
	}
	var deps []qcache.Dep
	if vs, ok := ks.values(ss.s.plans, plan); ok && len(ids) == 1 {
		deps, _ = c.BeginKeys(ids[0], plan.Key.Column, vs)
	}
	if deps == nil {
		deps = c.Begin(ids)
	}
	// exchange would settle and lease; the capture needs the connection first. Settle before the lease: the
	// settled writes raise the positions a replica must cover (replicas.go).
	e := ss.settle(plan)
	var err error
	if e == nil {
		e, err = ss.lease(plan)
	}
	if err != nil || e != nil {
		if err != nil {
			return 0, true, err
		}
		if err := ss.c.WriteError(e); err != nil {
			return 0, true, err
		}
		return 0, true, ss.c.Flush()
	}
	be := ss.be
	be.StartCapture(qcache.MaxReply)
	rows, failed, err := ss.exchange(p, plan, st, fn, toClient)
	reply, kept := be.StopCapture()
	if err == nil && !failed && kept && !ss.warned && !ss.retried { // a retry's reply was not captured
		if ss.pins()&^connectionPins == 0 {
			c.Put(key, reply, rows, deps, ttl)
		}
	}
	return rows, failed, err
}

// queryThroughCache runs a COM_QUERY that route sent to the cache; ttl, when not 0, bounds the entry's life.
func (ss *session) queryThroughCache(p []byte, text string, plan *Plan, ttl time.Duration, start time.Time) error {
	key := ss.cacheKey('Q', text)
	rows, failed, err := ss.throughCache(p, plan, nil, key, keySource{text: p[1:]}, ttl, relay.queryResults)
	ss.record(plan, rows, time.Since(start), failed || err != nil)
	return err
}

// keySource is where a statement's key value comes from: its text, or the parameters of an execute of st.
type keySource struct {
	text   []byte
	st     *prepared
	params []byte // an execute's null bitmap, types and values (executeParams)
}

// values are the integer values of plan's key in this statement, as qcache.BeginKeys takes them.
func (ks keySource) values(plans *PlanCache, plan *Plan) ([]any, bool) {
	switch {
	case plan.Key == nil:
		return nil, false
	case ks.st != nil && plan.Key.Param >= 0:
		vs := make([]any, 0, plan.Key.Values())
		for i := range plan.Key.Values() {
			v, ok := paramValue(ks.st.params, plan.Key.Param+i, ks.params)
			if !ok {
				return nil, false
			}
			vs = append(vs, v)
		}
		return vs, true
	case ks.text != nil && plan.Key.Literal >= 0:
		return plans.KeyValues(string(ks.text), plan)
	}
	return nil, false
}

// paramValue decodes parameter n of an execute (params as executeParams returns them: null bitmap, two type bytes
// per parameter, values) when it is an integer; ok is false for NULL, any other type, or parameters before it
// whose length it cannot tell.
func paramValue(count, n int, params []byte) (any, bool) {
	typ, unsigned, value, ok := paramAt(count, n, params)
	if !ok {
		return nil, false
	}
	size := len(value)
	switch typ {
	case mysql.TypeTiny, mysql.TypeShort, mysql.TypeLong, mysql.TypeInt24, mysql.TypeLonglong:
	default:
		return nil, false // not an integer key (floats; YEAR compares as a year; strings)
	}
	var u uint64
	for b := size - 1; b >= 0; b-- {
		u = u<<8 | uint64(value[b])
	}
	if unsigned {
		return u, true
	}
	shift := 64 - 8*size
	return int64(u<<shift) >> shift, true // sign-extended
}

// paramBytes returns parameter n of an execute when it is sent as a string (VARCHAR, CHAR, BLOB and the like):
// its bytes, a view of params.
func paramBytes(count, n int, params []byte) ([]byte, bool) {
	typ, _, value, ok := paramAt(count, n, params)
	switch typ {
	case mysql.TypeVarchar, mysql.TypeVarString, mysql.TypeString, mysql.TypeBlob, mysql.TypeTinyBlob,
		mysql.TypeMediumBlob, mysql.TypeLongBlob:
		return value, ok
	}
	return nil, false
}

// paramAt locates parameter n of an execute: its type, unsigned flag and value bytes (a length-encoded value
// without its length). ok is false for NULL, or when the parameters before it cannot be measured.
func paramAt(count, n int, params []byte) (typ byte, unsigned bool, value []byte, ok bool) {
	nb := (count + 7) / 8
	if n >= count || len(params) < nb+2*count {
		return 0, false, nil, false
	}
	nulls, types, values := params[:nb], params[nb:nb+2*count], params[nb+2*count:]
	for i := 0; i <= n; i++ {
		if nulls[i/8]&(1<<(i%8)) != 0 || types[2*i] == mysql.TypeNull { // no value bytes
			if i == n {
				return 0, false, nil, false
			}
			continue
		}
		size := 0
		switch types[2*i] {
		case mysql.TypeTiny:
			size = 1
		case mysql.TypeShort, mysql.TypeYear:
			size = 2
		case mysql.TypeLong, mysql.TypeInt24, mysql.TypeFloat:
			size = 4
		case mysql.TypeLonglong, mysql.TypeDouble:
			size = 8
		default: // strings, decimals, blobs; dates and times carry a length byte
			l, hdr, ok := lenEnc(values)
			if !ok || len(values) < hdr+int(l) {
				return 0, false, nil, false
			}
			if i == n {
				return types[2*i], false, values[hdr : hdr+int(l)], true
			}
			values = values[hdr+int(l):]
			continue
		}
		if len(values) < size {
			return 0, false, nil, false
		}
		if i == n {
			return types[2*i], types[2*i+1]&0x80 != 0, values[:size], true
		}
		values = values[size:]
	}
	return 0, false, nil, false
}

// lenEnc reads a length-encoded integer: its value and how many bytes it took.
func lenEnc(b []byte) (v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch c := b[0]; {
	case c < 0xfb:
		return uint64(c), 1, true
	case c == 0xfc && len(b) >= 3:
		return uint64(b[1]) | uint64(b[2])<<8, 3, true
	case c == 0xfd && len(b) >= 4:
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, 4, true
	case c == 0xfe && len(b) >= 9:
		return binary.LittleEndian.Uint64(b[1:]), 9, true
	}
	return 0, 0, false
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

// executeParams returns the parts of a COM_STMT_EXECUTE (p, its statement id already checked) that, with the
// statement's text, determine its reply: null bitmap, parameter types and values, in that order (slices of p and
// st). ok is false for an execute the cache must not answer: a cursor, several iterations, long data, or types
// never bound.
func executeParams(st *prepared, p []byte) (params [3][]byte, ok bool) {
	if len(p) < 10 || p[5] != 0 || binary.LittleEndian.Uint32(p[6:]) != 1 || st.longData {
		return params, false
	}
	if st.params == 0 {
		return params, true
	}
	nulls, _, _, values, ok := paramsAt(st, p)
	if !ok || st.types == nil {
		return params, false
	}
	return [3][]byte{nulls, st.types, values}, true
}

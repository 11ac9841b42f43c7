package sqlproxy

// The shard router: which group runs a statement when a shard map is loaded (Options.Shards).
//
// A statement that names no sharded table runs where it would without a map: on the session's group, which is the
// map's global group. A statement on a sharded table runs on the one group that holds the shard its key value
// falls in: the value is read per execution from the statement's text, or from an execute's parameters, where the
// plan found it (routeref.go), so routing costs no round trip and, for the common "key = literal" text and every
// prepared statement, no parse. What cannot go to one shard is refused with ER_NOT_SUPPORTED_YET naming the table
// and what is missing, never answered from the wrong server: a join or subquery with a sharded table, no key, keys
// on several shards, an INSERT without the key or with rows for several shards, INSERT … SELECT, an UPDATE of the
// key. The hint /*+ keyway shard_key=VALUE */ names the value for a statement whose text does not.
//
// A session holding a connection (a transaction, a pin) runs everything on it: a statement that routes to another
// group is refused, so a transaction never spans shards (there is no two-phase commit). The routing happens before
// the lease (session.lease), with the map loaded once per statement, so a reload never routes one statement by two
// maps.

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pingcap/tidb/pkg/parser"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/validity"
)

// shardRefusal is the ERR for a statement the router cannot send to one shard.
func shardRefusal(format string, args ...any) *mysqlwire.Error {
	return mysqlwire.NewError(mysqlwire.ERNotSupportedYet, "42000", "keyway: "+format, args...)
}

// routeValues is where the values of one execution come from.
type routeValues struct {
	sql    string     // the statement's text (an execute's: its prepared text)
	st     *prepared  // an execute's statement; nil for a text statement
	params []byte     // an execute's parameters (paramValue's form: null bitmap, types, values)
	spans  [][2]int   // sql's literal spans, read on first use
	plans  *PlanCache // parses sql when needed
	buf    []byte
	// src is the routeRef whose values are this execution's: the plan's, when every literal can be read by its
	// token (or the statement is an execute, whose text is the plan's own), else this statement's own parse (an IN
	// list or an INSERT's rows may be longer or shorter than in the statement the plan was built from).
	src  *routeRef
	fast bool // src is the plan's: literals are read by token
}

// shape sets rv.src for plan's route; false when the statement's own parse fails.
func (rv *routeValues) shape(r *routeRef) bool {
	if r.fast || rv.st != nil {
		rv.src, rv.fast = r, r.fast
		return true
	}
	rv.src = rv.plans.routeOfText(rv.sql)
	return rv.src != nil
}

// value returns v's value in this execution (v one of rv.src's): its text, whether it is a string, and ok.
func (rv *routeValues) value(v *routeVal) ([]byte, bool, bool) {
	switch {
	case !v.ok:
		return nil, false, false
	case v.param >= 0:
		return rv.param(v.param)
	case !rv.fast:
		return []byte(v.lit), v.str, true // this statement's own parse, or an execute's text
	}
	if rv.spans == nil {
		rv.spans, _ = literalSpans(rv.sql)
	}
	if v.tok >= 0 && v.tok < len(rv.spans) {
		if text, str, ok := literalText(rv.sql[rv.spans[v.tok][0]:rv.spans[v.tok][1]]); ok {
			return []byte(text), str, true
		}
	}
	return nil, false, false
}

// param returns parameter n of the execute as a shard key value: an integer as decimal text, a string as its bytes.
func (rv *routeValues) param(n int) ([]byte, bool, bool) {
	if rv.st == nil {
		return nil, false, false
	}
	if v, ok := paramValue(rv.st.params, n, rv.params); ok {
		switch x := v.(type) {
		case int64:
			rv.buf = strconv.AppendInt(rv.buf[:0], x, 10)
		case uint64:
			rv.buf = strconv.AppendUint(rv.buf[:0], x, 10)
		}
		return rv.buf, false, true
	}
	if b, ok := paramBytes(rv.st.params, n, rv.params); ok {
		return b, true, true
	}
	return nil, false, false
}

// routeOfText parses sql for its routeRef (the router's slow path: IN lists, several rows, odd literals).
func (pc *PlanCache) routeOfText(sql string) (r *routeRef) {
	ps := pc.parsers.Get().(*parser.Parser)
	defer func() {
		if recover() != nil {
			r = nil // drop ps: its state is unknown after a panic
		}
	}()
	stmts, _, err := ps.Parse(sql, "", "")
	if err == nil {
		r = routeOf(sql, stmts)
	}
	pc.parsers.Put(ps)
	return r
}

// shardRoute is where the router sends one execution of a statement: one shard, or every shard of a mapping (DDL,
// and a scatter read of a table that allows it), or nowhere in particular (no sharded table: the session's group).
type shardRoute struct {
	table *shard.Table
	one   *shard.Shard
	all   bool // every group of table's mapping, in shard order
	ddl   bool // all, for DDL: each shard runs it, and the client hears every shard's result
}

// shardGroups returns the backend groups of route: one, or all of the mapping's; or the refusal when one of them is
// not configured.
func (ss *session) shardGroups(route shardRoute) ([]*backend.Group, *mysqlwire.Error) {
	var names []string
	switch {
	case route.one != nil:
		names = []string{route.one.Group}
	case route.all:
		names = route.table.Mapping.Groups()
	}
	gs := make([]*backend.Group, 0, len(names))
	for _, name := range names {
		g := ss.s.opts.Topology.Group(name)
		if g == nil {
			return nil, shardRefusal("table %s has a shard on group %s, which is not configured", route.table, name)
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// shardGroup is shardGroups for a statement that must run on one group: nil for the session's own; the refusal
// for one that would need several (an execute: scatters and DDL fan-out run as text queries).
func (ss *session) shardGroup(plan *Plan, rv *routeValues) (*backend.Group, *mysqlwire.Error) {
	route, e := routeShard(ss.s.shardMap(), plan, ss.db, rv)
	if e != nil || route.table == nil {
		return nil, e
	}
	if route.all {
		return nil, shardRefusal("a prepared statement on sharded table %s must name one shard's key; a statement for every shard runs as a text query", route.table)
	}
	gs, e := ss.shardGroups(route)
	if e != nil {
		return nil, e
	}
	return gs[0], nil
}

// routeShard is the router: where plan runs in this execution (rv) under map m, with db the session's default
// database; the zero route when the statement names no sharded table; or the refusal.
func routeShard(m *shard.Map, plan *Plan, db string, rv *routeValues) (shardRoute, *mysqlwire.Error) {
	if m == nil || plan == nil || len(plan.Tables) == 0 {
		return shardRoute{}, nil
	}
	var t *shard.Table
	ids := plan.TableIDs(db)
	for _, id := range ids {
		if x := m.Table(id.Schema, id.Name); x != nil {
			if t != nil && t != x {
				return shardRoute{}, shardRefusal("the statement names sharded tables %s and %s: a statement runs on one shard", t, x)
			}
			t = x
		}
	}
	if t == nil {
		return shardRoute{}, nil
	}
	r := plan.route
	switch {
	case r == nil:
		return shardRoute{}, shardRefusal("cannot route a statement on sharded table %s: %s", t, cmp.Or(plan.ParseError, "it could not be parsed"))
	case r.ddl && len(ids) == 1 && !plan.multi:
		return shardRoute{table: t, all: true, ddl: true}, nil
	case r.ddl:
		return shardRoute{}, shardRefusal("DDL on sharded table %s runs on every shard, alone: send it as a statement of its own, naming only that table", t)
	case len(ids) > 1:
		return shardRoute{}, shardRefusal("the statement joins sharded table %s with another table: a statement on a sharded table names only it", t)
	case r.unroutable != "":
		return shardRoute{}, shardRefusal("cannot route a statement on sharded table %s: %s", t, r.unroutable)
	}
	for _, c := range r.sets {
		if c == t.Column {
			return shardRoute{}, shardRefusal("the statement changes shard key %s.%s: delete the row and insert it with its new key instead", t, t.Column)
		}
	}
	// scatter is the route of a read the key does not confine to one shard, where the table allows it.
	scatter := func(why string) (shardRoute, *mysqlwire.Error) {
		if !t.Scatter || r.insert || plan.Class != ClassRead || plan.Pins != 0 {
			return shardRoute{}, shardRefusal("%s (table %s does not allow scatter, or the statement is not a plain SELECT)", why, t)
		}
		if r.gathers != "" {
			return shardRoute{}, shardRefusal("a SELECT of %s on every shard cannot use %s: keyway concatenates the shards' rows and does not merge them", t, r.gathers)
		}
		return shardRoute{table: t, all: true}, nil
	}
	var sh *shard.Shard
	several := false
	pick := func(v []byte, str bool) *mysqlwire.Error {
		s, err := t.ShardOf(v, str)
		if err != nil {
			return shardRefusal("%v", err)
		}
		if sh != nil && s != sh {
			several = true
			return shardRefusal("the statement's %s values are on several shards of %s (%s and %s): send one statement per shard", t.Column, t, sh.Name, s.Name)
		}
		sh = s
		return nil
	}
	one := func() (shardRoute, *mysqlwire.Error) { return shardRoute{table: t, one: sh}, nil }
	if key, ok := hintShardKey(rv.sql); ok {
		if e := pick([]byte(key), !isDecimal(key)); e != nil {
			return shardRoute{}, e
		}
		return one()
	}
	if !rv.shape(r) {
		return shardRoute{}, shardRefusal("cannot route a statement on sharded table %s: it does not parse", t)
	}
	src := rv.src
	if r.insert {
		col := -1
		for i, c := range r.cols {
			if c == t.Column {
				col = i
			}
		}
		if len(r.cols) == 0 {
			return shardRoute{}, shardRefusal("INSERT into sharded table %s without a column list: name the columns, so that keyway can find shard key %s among the values", t, t.Column)
		}
		if col < 0 {
			return shardRoute{}, shardRefusal("INSERT into sharded table %s must name its shard key column %s (an AUTO_INCREMENT key cannot be routed before the row exists: take the key from a sequence on the global group and insert it)", t, t.Column)
		}
		for i := range src.rows {
			var v []byte
			var str, ok bool
			if col < len(src.rows[i]) {
				v, str, ok = rv.value(&src.rows[i][col])
			}
			if !ok {
				return shardRoute{}, shardRefusal("the value of shard key %s in row %d of the INSERT into %s is not a literal or parameter keyway can read", t.Column, i+1, t)
			}
			if e := pick(v, str); e != nil {
				return shardRoute{}, e
			}
		}
		return one()
	}
	eq := -1
	for i := range src.eqs {
		if src.eqs[i].column == t.Column {
			eq = i
			break
		}
	}
	if eq < 0 {
		return scatter(fmt.Sprintf("the statement on sharded table %s has no %s = value in its WHERE (or /*+ keyway shard_key=VALUE */): keyway cannot tell its shard", t, t.Column))
	}
	for j := range src.eqs[eq].vals {
		v, str, ok := rv.value(&src.eqs[eq].vals[j])
		if !ok {
			return shardRoute{}, shardRefusal("the value of shard key %s of %s is not a literal or parameter keyway can read", t.Column, t)
		}
		if e := pick(v, str); e != nil {
			if several {
				return scatter(strings.TrimPrefix(e.Message, "keyway: "))
			}
			return shardRoute{}, e
		}
	}
	return one()
}

// hintShardKey reads /*+ keyway shard_key=VALUE */ from sql (VALUE unquoted, or in single quotes).
func hintShardKey(sql string) (string, bool) {
	i := strings.Index(sql, "/*+")
	if i < 0 {
		return "", false
	}
	body, _, ok := strings.Cut(sql[i+3:], "*/")
	if !ok {
		return "", false
	}
	f := strings.Fields(body)
	if len(f) < 2 || !strings.EqualFold(f[0], "keyway") {
		return "", false
	}
	for _, a := range f[1:] {
		if len(a) > 10 && strings.EqualFold(a[:10], "shard_key=") {
			v := a[10:]
			if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
				v = v[1 : len(v)-1]
			}
			return v, true
		}
	}
	return "", false
}

func isDecimal(s string) bool {
	_, ok := decimalKey(s)
	return ok
}

// routeParams returns an execute's parameters as paramValue reads them (null bitmap, types, values), with the
// types the client bound earlier when this execute omits them; nil when it has none.
func (ss *session) routeParams(st *prepared, p []byte) []byte {
	nulls, bound, types, values, ok := paramsAt(st, p)
	if !ok {
		return nil
	}
	if !bound {
		types = st.types
	}
	if len(types) != 2*st.params {
		return nil
	}
	ss.routeBuf = append(append(append(ss.routeBuf[:0], nulls...), types...), values...)
	return ss.routeBuf
}

// prepareShard is where a COM_STMT_PREPARE of query runs when it names a sharded table: the first shard of the
// table's mapping (each shard holds the same definition); nil otherwise. The executes are routed one by one.
func (ss *session) prepareShard(query string) *backend.Group {
	m := ss.s.shardMap()
	if m == nil {
		return nil
	}
	for _, id := range ss.s.plans.Plan(query).TableIDs(ss.db) {
		if t := m.Table(id.Schema, id.Name); t != nil && len(t.Mapping.Shards) > 0 {
			return ss.s.opts.Topology.Group(t.Mapping.Shards[0].Group)
		}
	}
	return nil
}

// deferBegin answers a transaction start (BEGIN, START TRANSACTION) of a session that is not pinned, when a shard
// map is loaded (a connection kept only for the previous statement's diagnostics goes back first): the statement runs later, first on the connection the transaction's next statement
// borrows (session.lease), so the transaction starts on the shard that statement routes to. A COMMIT or ROLLBACK
// of such a transaction before any statement ran ends it here too. done reports that the client got its reply.
func (ss *session) deferBegin(plan *Plan, sql string) (done bool, err error) {
	if len(plan.Tables) > 0 || plan.multi || plan.ParseError != "" {
		return false, nil
	}
	if ss.be != nil {
		if pinned, _ := ss.pinned(); pinned || !plan.InTransaction || plan.EndsTransaction {
			return false, nil
		}
		ss.holdNext = false
		ss.release()
	}
	switch {
	case ss.pendingBegin == "" && plan.InTransaction && plan.Pins == 0 && plan.Class == ClassTransaction:
		ss.pendingBegin = strings.Clone(sql)
		ss.status |= mysqlwire.StatusInTrans
	case ss.pendingBegin != "" && plan.EndsTransaction && !plan.InTransaction:
		ss.pendingBegin = ""
		ss.status &^= mysqlwire.StatusInTrans
	default:
		return false, nil
	}
	return true, ss.c.WriteOK(ss.status)
}

// routeQuery routes a text statement (query): done reports that the client has its reply (a refusal, a scatter, a
// DDL fan-out); otherwise ss.shard is the group that runs it (nil: the session's own) until the statement ends.
func (ss *session) routeQuery(p []byte, sql string, plan *Plan, start time.Time) (done bool, err error) {
	if done, err := ss.deferBegin(plan, sql); done {
		return true, err
	}
	route, e := routeShard(ss.s.shardMap(), plan, ss.db, &routeValues{sql: sql, plans: ss.s.plans})
	var gs []*backend.Group
	if e == nil && route.table != nil {
		gs, e = ss.shardGroups(route)
	}
	if e == nil && route.all && !route.ddl && ss.pendingBegin != "" {
		e = shardRefusal("a statement for every shard of %s runs outside transactions", route.table)
	}
	if e == nil && route.all && ss.be != nil {
		if pinned, why := ss.pinned(); pinned && !ss.holdNext {
			e = shardRefusal("a statement for every shard of %s runs outside transactions and pins (this session: %s)", route.table, why)
		} else {
			ss.holdNext = false
			ss.release()
		}
	}
	if e == nil && route.ddl && ss.pendingBegin != "" {
		// DDL commits the transaction open before it, as on one server: the BEGIN keyway holds is over.
		ss.pendingBegin = ""
		ss.status &^= mysqlwire.StatusInTrans
	}
	switch {
	case e != nil:
		ss.record(plan, 0, time.Since(start), true)
		return true, ss.reply(e)
	case route.ddl:
		return true, ss.fanOutDDL(sql, plan, route.table, gs, start)
	case route.all:
		return true, ss.scatter(p, plan, gs, start)
	case len(gs) == 1:
		ss.shard = gs[0]
	}
	return false, nil
}

// fanOutDDL runs DDL statement sql on every group of gs, one after the other, each on a connection borrowed with
// the session's state. DDL is not transactional: each shard's outcome stands, and the client hears all of them
// (an ERR naming each shard's result when any failed, else an OK).
func (ss *session) fanOutDDL(sql string, plan *Plan, t *shard.Table, gs []*backend.Group, start time.Time) error {
	var results []string
	failed := false
	for _, g := range gs {
		pool := g.Pool(ss.pool.Key(), ss.user.backendPassword)
		be, err := pool.Lease(context.Background(), &ss.state, backend.Needs{})
		if err == nil {
			err = be.Exec(sql)
			be.Release()
		}
		if err != nil {
			failed = true
			results = append(results, fmt.Sprintf("%s: %v", g.Name(), err))
		} else {
			results = append(results, g.Name()+": ok")
		}
	}
	ss.invalidateWritten(plan, false) // whatever ran, the definitions may have changed
	ss.record(plan, 0, time.Since(start), failed)
	if failed {
		return ss.reply(mysqlwire.NewError(mysqlwire.ERUnknownError, "HY000",
			"keyway: DDL on sharded table %s did not succeed on every shard (each shard's result: %s)", t, strings.Join(results, "; ")))
	}
	return ss.c.WriteOK(ss.status)
}

// scatter runs plan's SELECT (COM_QUERY p) on every group of gs in turn and streams one result set to the client: the column
// definitions of the first shard, the rows of each, in shard order, and the last shard's terminator
// (relay.scatterPart). An ERR from any shard ends the reply (an ERR is legal at any point of a result set).
func (ss *session) scatter(p []byte, plan *Plan, gs []*backend.Group, start time.Time) error {
	var total int64
	failed := false
	for i, g := range gs {
		ss.shard = g
		first, last := i == 0, i == len(gs)-1
		rows, bad, err := ss.exchange(p, plan, nil, func(r relay) (int64, bool, error) { return r.scatterPart(first, last) }, toClient)
		total += rows
		if err != nil || bad {
			failed = true
			ss.shard = nil
			ss.record(plan, total, time.Since(start), true)
			return err
		}
		ss.release() // each shard's connection goes back before the next is borrowed
	}
	ss.shard = nil
	ss.record(plan, total, time.Since(start), failed)
	return nil
}

// gate is the freshness gate of the group that runs the session's statement (runGroup): its own group's, or the
// shard's the router chose (each shard group has its binlog follower, so one lagging shard stops only its own
// cached answers and replica reads). ok is false when nothing vouches for that group's copies.
func (ss *session) gate() (*validity.Gate, bool) {
	g := ss.runGroup()
	return ss.gateOf(g)
}

// gateOf is group g's gate (see gate): the session's own group's as the server resolved it at login, another's from
// the registry; ok is false for a group without one while the session's has one.
func (ss *session) gateOf(g *backend.Group) (*validity.Gate, bool) {
	if g == ss.user.group || ss.s.opts.Validity == nil {
		return ss.user.gate, true
	}
	gate := ss.s.opts.Validity.LookupGate(g.Name())
	return gate, gate != nil || ss.user.gate == nil
}

// hasGate reports whether the group that runs the session's statement has a gate (replica reads need one).
func (ss *session) hasGate() bool {
	g, ok := ss.gate()
	return ok && g != nil
}

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
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/shard"
)

// shardRefusal is the ERR for a statement the router cannot send to one shard.
func shardRefusal(format string, args ...any) *mysqlwire.Error {
	return mysqlwire.NewError(mysqlwire.ERNotSupportedYet, "42000", "keyway: "+format, args...)
}

// routeValues is where the values of one execution come from.
type routeValues struct {
	sql    string     // a text statement's text ("" for an execute)
	st     *prepared  // an execute's statement
	params []byte     // an execute's parameters (executeParams' three parts, joined)
	spans  [][2]int   // sql's literal spans, read on first use
	parsed *routeRef  // sql's own routeRef, when the plan's cannot be read by token
	plans  *PlanCache // parses sql when needed
	plan   *Plan
	buf    []byte
}

// value returns v's value in this execution: its text, whether it is a string, and ok.
func (rv *routeValues) value(at func(r *routeRef) *routeVal) ([]byte, bool, bool) {
	r := rv.plan.route
	v := at(r)
	if v == nil || !v.ok {
		return nil, false, false
	}
	if v.param >= 0 {
		return rv.param(v.param)
	}
	if r.fast && v.tok >= 0 {
		if rv.spans == nil {
			rv.spans, _ = literalSpans(rv.sql)
		}
		if v.tok < len(rv.spans) {
			if text, str, ok := literalText(rv.sql[rv.spans[v.tok][0]:rv.spans[v.tok][1]]); ok {
				return []byte(text), str, true
			}
		}
	}
	// The text cannot be read by token: this statement's own parse says.
	if rv.parsed == nil {
		rv.parsed = rv.plans.routeOfText(rv.sql)
		if rv.parsed == nil {
			return nil, false, false
		}
	}
	if v = at(rv.parsed); v == nil || !v.ok || v.param >= 0 {
		return nil, false, false
	}
	return []byte(v.lit), v.str, true
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

// shardGroup returns the group that must run plan in this execution (rv): nil when no map is loaded or the
// statement names no sharded table (the session's own group), else the shard's group; or the refusal the client
// gets instead.
func (ss *session) shardGroup(plan *Plan, rv *routeValues) (*backend.Group, *mysqlwire.Error) {
	sh, e := routeShard(ss.s.shardMap(), plan, ss.db, rv)
	if sh == nil || e != nil {
		return nil, e
	}
	g := ss.s.opts.Topology.Group(sh.Group)
	if g == nil {
		return nil, shardRefusal("shard %s is on group %s, which is not configured", sh.Name, sh.Group)
	}
	return g, nil
}

// routeShard is the router: the shard of m that must run plan in this execution (rv), with db the session's
// default database; nil when the statement names no sharded table; or the refusal.
func routeShard(m *shard.Map, plan *Plan, db string, rv *routeValues) (*shard.Shard, *mysqlwire.Error) {
	if m == nil || plan == nil || len(plan.Tables) == 0 {
		return nil, nil
	}
	var t *shard.Table
	ids := plan.TableIDs(db)
	for _, id := range ids {
		if x := m.Table(id.Schema, id.Name); x != nil {
			if t != nil && t != x {
				return nil, shardRefusal("the statement names sharded tables %s and %s: a statement runs on one shard", t, x)
			}
			t = x
		}
	}
	if t == nil {
		return nil, nil
	}
	r := plan.route
	switch {
	case r == nil:
		return nil, shardRefusal("cannot route a statement on sharded table %s: %s", t, cmp.Or(plan.ParseError, "it could not be parsed"))
	case r.ddl:
		return nil, shardRefusal("DDL on sharded table %s must run on each of its shards (groups %s); keyway does not fan DDL out yet", t, strings.Join(t.Mapping.Groups(), ", "))
	case len(ids) > 1:
		return nil, shardRefusal("the statement joins sharded table %s with another table: a statement on a sharded table names only it", t)
	case r.unroutable != "":
		return nil, shardRefusal("cannot route a statement on sharded table %s: %s", t, r.unroutable)
	}
	for _, c := range r.sets {
		if c == t.Column {
			return nil, shardRefusal("the statement changes shard key %s.%s: delete the row and insert it with its new key instead", t, t.Column)
		}
	}
	rv.plan = plan
	var sh *shard.Shard
	pick := func(v []byte, str bool) *mysqlwire.Error {
		s, err := t.ShardOf(v, str)
		if err != nil {
			return shardRefusal("%v", err)
		}
		if sh != nil && s != sh {
			return shardRefusal("the statement's %s values are on several shards of %s (%s and %s): send one statement per shard", t.Column, t, sh.Name, s.Name)
		}
		sh = s
		return nil
	}
	if key, ok := hintShardKey(rv.sql); ok {
		if e := pick([]byte(key), !isDecimal(key)); e != nil {
			return nil, e
		}
		return sh, nil
	}
	if r.insert {
		col := -1
		for i, c := range r.cols {
			if c == t.Column {
				col = i
			}
		}
		if len(r.cols) == 0 {
			return nil, shardRefusal("INSERT into sharded table %s without a column list: name the columns, so that keyway can find shard key %s among the values", t, t.Column)
		}
		if col < 0 {
			return nil, shardRefusal("INSERT into sharded table %s must name its shard key column %s (an AUTO_INCREMENT key cannot be routed before the row exists: take the key from a sequence on the global group and insert it)", t, t.Column)
		}
		for i := range r.rows {
			v, str, ok := rv.value(func(r *routeRef) *routeVal { return rowVal(r, i, col) })
			if !ok {
				return nil, shardRefusal("the value of shard key %s in row %d of the INSERT into %s is not a literal or parameter keyway can read", t.Column, i+1, t)
			}
			if e := pick(v, str); e != nil {
				return nil, e
			}
		}
		return sh, nil
	}
	eq := -1
	for i := range r.eqs {
		if r.eqs[i].column == t.Column {
			eq = i
			break
		}
	}
	if eq < 0 {
		return nil, shardRefusal("the statement on sharded table %s has no %s = value in its WHERE (or /*+ keyway shard_key=VALUE */): keyway cannot tell its shard", t, t.Column)
	}
	for j := range r.eqs[eq].vals {
		v, str, ok := rv.value(func(r *routeRef) *routeVal { return eqVal(r, eq, j) })
		if !ok {
			return nil, shardRefusal("the value of shard key %s of %s is not a literal or parameter keyway can read", t.Column, t)
		}
		if e := pick(v, str); e != nil {
			return nil, e
		}
	}
	return sh, nil
}

// rowVal and eqVal find a value in r by position (nil when this statement's parse has no such value).
func rowVal(r *routeRef, row, col int) *routeVal {
	if row < len(r.rows) && col < len(r.rows[row]) {
		return &r.rows[row][col]
	}
	return nil
}

func eqVal(r *routeRef, eq, j int) *routeVal {
	if eq < len(r.eqs) && j < len(r.eqs[eq].vals) {
		return &r.eqs[eq].vals[j]
	}
	return nil
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

// deferBegin answers a transaction start (BEGIN, START TRANSACTION) of a session that holds no connection itself,
// when a shard map is loaded: the statement runs later, first on the connection the transaction's next statement
// borrows (session.lease), so the transaction starts on the shard that statement routes to. A COMMIT or ROLLBACK
// of such a transaction before any statement ran ends it here too. done reports that the client got its reply.
func (ss *session) deferBegin(plan *Plan, sql string) (done bool, err error) {
	if ss.be != nil || len(plan.Tables) > 0 || plan.multi || plan.ParseError != "" {
		return false, nil
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

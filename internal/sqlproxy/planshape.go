package sqlproxy

// What routing and caching need from a statement's shape, derived once per digest in PlanCache.build:
//
//   - Cacheable: a single SELECT whose answer depends only on table contents keyway can invalidate: no locking
//     read, no SQL_NO_CACHE, no variables, no function whose answer changes without a write (NOW(), RAND(),
//     CONNECTION_ID()…), no system schema (information_schema, performance_schema, mysql, sys), at least one
//     table. NotCacheable says why not. Whether a session may use the cache at a given moment (transactions,
//     session state) is the route step's question, not the plan's (pipeline.go).
//   - Key: for a single-table SELECT, UPDATE or DELETE whose WHERE is one equality on one column, the table, the
//     column, and where the value comes from. The digest erased the literal, so the plan keeps its position: the
//     Nth literal of the statement text (0-based, in text order, counting every literal the lexer sees), or the
//     Nth parameter marker of a prepared statement. Whether the column is the table's key is for whoever
//     serves the statement to check against the schema.

import (
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// KeyRef is where a point statement's key comes from (see Plan.Key).
type KeyRef struct {
	Table  string // as the statement names it, lower-case ("schema.table" or "table")
	Column string // lower-case
	// Exactly one of Literal and Param is ≥ 0: the value is the Literal-th literal of the statement text, or the
	// Param-th parameter of COM_STMT_EXECUTE.
	Literal, Param int
	// In is the length of a "column IN (…)" list (0 for "column = value"): its values are In literals from the
	// Literal-th, or In parameters from the Param-th.
	In int
}

// Values is how many key values the statement names.
func (k *KeyRef) Values() int { return max(1, k.In) }

// volatileFuncs answer differently without any table changing, so a statement calling one is never cached.
var volatileFuncs = map[string]bool{
	"now": true, "current_timestamp": true, "localtime": true, "localtimestamp": true, "sysdate": true,
	"curdate": true, "current_date": true, "curtime": true, "current_time": true, "utc_date": true,
	"utc_time": true, "utc_timestamp": true, "unix_timestamp": true, "rand": true, "uuid": true,
	"uuid_short": true, "sys_guid": true, "connection_id": true, "last_insert_id": true, "found_rows": true,
	"row_count": true, "current_user": true, "user": true, "session_user": true, "system_user": true,
	"database": true, "schema": true, "sleep": true, "benchmark": true, "get_lock": true, "release_lock": true,
	"release_all_locks": true, "is_free_lock": true, "is_used_lock": true, "master_pos_wait": true,
	"nextval": true, "lastval": true, "setval": true, "load_file": true, "version": true,
}

// systemSchemas are not written through statements keyway sees nor logged in the binlog: never cached.
var systemSchemas = map[string]bool{"information_schema": true, "performance_schema": true, "mysql": true, "sys": true}

// shape fills p.Cacheable, p.NotCacheable and p.Key from the parsed statements (p.Class and p.Tables are set).
func shape(stmts []ast.StmtNode, p *Plan) {
	p.Key = pointKey(stmts)
	p.NotCacheable = notCacheable(stmts, p)
	p.Cacheable = p.NotCacheable == ""
}

func notCacheable(stmts []ast.StmtNode, p *Plan) string {
	if len(stmts) != 1 {
		return "several statements"
	}
	sel, ok := stmts[0].(*ast.SelectStmt)
	if !ok || p.Class != ClassRead {
		return "not a SELECT"
	}
	if sel.LockInfo != nil && sel.LockInfo.LockType != ast.SelectLockNone {
		return "a locking read (FOR UPDATE / LOCK IN SHARE MODE)"
	}
	if sel.SelectStmtOpts != nil && !sel.SelectStmtOpts.SQLCache {
		return "SQL_NO_CACHE"
	}
	if len(p.Tables) == 0 {
		// Without a table only a constant (SELECT 2, SELECT 1+1, seed 003's probe) has an answer that never
		// changes: functions may read state no write changes (sequences, files, locks), so none is allowed.
		c := &constantFinder{constant: true}
		stmts[0].Accept(c)
		if !c.constant {
			return "reads no table and is not a constant"
		}
		return ""
	}
	for _, t := range p.Tables {
		if schema, _, ok := strings.Cut(t, "."); ok && systemSchemas[schema] {
			return "reads a system schema (" + schema + ")"
		}
	}
	v := &volatileFinder{}
	stmts[0].Accept(v)
	return v.why
}

// constantFinder clears constant when a statement holds anything but literals and operators on them.
type constantFinder struct{ constant bool }

func (c *constantFinder) Enter(n ast.Node) (ast.Node, bool) {
	switch n.(type) {
	case *ast.SelectStmt, *ast.FieldList, *ast.SelectField, *test_driver.ValueExpr, *ast.BinaryOperationExpr,
		*ast.UnaryOperationExpr, *ast.ParenthesesExpr:
	default:
		c.constant = false
	}
	return n, !c.constant
}

func (c *constantFinder) Leave(n ast.Node) (ast.Node, bool) { return n, c.constant }

// volatileFinder finds what makes a statement's answer change without a table write.
type volatileFinder struct{ why string }

func (v *volatileFinder) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.VariableExpr:
		v.why = "reads a variable"
	case *ast.FuncCallExpr:
		if volatileFuncs[x.FnName.L] {
			v.why = "calls " + strings.ToUpper(x.FnName.L) + "()"
		}
	}
	return n, v.why != ""
}

func (v *volatileFinder) Leave(n ast.Node) (ast.Node, bool) { return n, v.why == "" }

// pointKey returns the key of a single-table SELECT, UPDATE or DELETE whose WHERE is one equality, or one
// IN list, on a column, or nil.
func pointKey(stmts []ast.StmtNode) *KeyRef {
	k, _ := pointKeyExpr(stmts)
	return k
}

// pointKeyValues are the values of a point statement's key literals when all are integers (int64 or uint64), as
// the result cache keys entries by them (validity.ColumnKey); ok is false otherwise.
func pointKeyValues(stmts []ast.StmtNode) (vs []any, ok bool) {
	k, lits := pointKeyExpr(stmts)
	if k == nil || len(lits) == 0 {
		return nil, false
	}
	for _, lit := range lits {
		switch lit.Datum.Kind() {
		case test_driver.KindInt64:
			vs = append(vs, lit.Datum.GetInt64())
		case test_driver.KindUint64:
			vs = append(vs, lit.Datum.GetUint64())
		default:
			return nil, false
		}
	}
	return vs, true
}

// pointKeyExpr is pointKey, with the key's literals when they are literals.
func pointKeyExpr(stmts []ast.StmtNode) (*KeyRef, []*test_driver.ValueExpr) {
	if len(stmts) != 1 {
		return nil, nil
	}
	var refs *ast.TableRefsClause
	var where ast.ExprNode
	switch s := stmts[0].(type) {
	case *ast.SelectStmt:
		if s.With != nil || s.GroupBy != nil || s.Having != nil || s.SelectIntoOpt != nil {
			return nil, nil
		}
		refs, where = s.From, s.Where
	case *ast.UpdateStmt:
		if s.MultipleTable {
			return nil, nil
		}
		refs, where = s.TableRefs, s.Where
	case *ast.DeleteStmt:
		if s.IsMultiTable {
			return nil, nil
		}
		refs, where = s.TableRefs, s.Where
	default:
		return nil, nil
	}
	table := singleTable(refs)
	if in, ok := where.(*ast.PatternInExpr); ok && table != "" {
		return inKey(stmts[0], table, in)
	}
	eq, ok := where.(*ast.BinaryOperationExpr)
	if table == "" || !ok || eq.Op != opcode.EQ {
		return nil, nil
	}
	col, val := eq.L, eq.R
	if _, isCol := col.(*ast.ColumnNameExpr); !isCol {
		col, val = val, col
	}
	c, ok := col.(*ast.ColumnNameExpr)
	if !ok {
		return nil, nil
	}
	k := &KeyRef{Table: table, Column: c.Name.Name.L, Literal: -1, Param: -1}
	switch v := val.(type) {
	case *test_driver.ParamMarkerExpr:
		if k.Param = paramIndex(stmts[0], v); k.Param < 0 {
			return nil, nil
		}
		return k, nil
	case *test_driver.ValueExpr:
		lits := &literalCollector{}
		stmts[0].Accept(lits)
		k.Literal = lits.index(v)
		if k.Literal < 0 {
			return nil, nil
		}
		return k, []*test_driver.ValueExpr{v}
	default:
		return nil, nil
	}
}

// inKey is pointKeyExpr for "column IN (…)": every element a literal, or every element a parameter, in order.
func inKey(stmt ast.StmtNode, table string, in *ast.PatternInExpr) (*KeyRef, []*test_driver.ValueExpr) {
	c, ok := in.Expr.(*ast.ColumnNameExpr)
	if !ok || in.Not || in.Sel != nil || len(in.List) == 0 {
		return nil, nil
	}
	k := &KeyRef{Table: table, Column: c.Name.Name.L, Literal: -1, Param: -1, In: len(in.List)}
	if first, ok := in.List[0].(*test_driver.ParamMarkerExpr); ok {
		k.Param = paramIndex(stmt, first)
		for i, e := range in.List {
			if p, ok := e.(*test_driver.ParamMarkerExpr); !ok || k.Param < 0 || paramIndex(stmt, p) != k.Param+i {
				return nil, nil
			}
		}
		return k, nil
	}
	lits := &literalCollector{}
	stmt.Accept(lits)
	var vs []*test_driver.ValueExpr
	for i, e := range in.List {
		v, ok := e.(*test_driver.ValueExpr)
		if !ok {
			return nil, nil
		}
		at := lits.index(v)
		if at < 0 || i > 0 && at != k.Literal+i {
			return nil, nil
		}
		if i == 0 {
			k.Literal = at
		}
		vs = append(vs, v)
	}
	return k, vs
}

// singleTable is the lower-case name of the one table refs reads ("schema.table" or "table"), or "".
func singleTable(refs *ast.TableRefsClause) string {
	if refs == nil || refs.TableRefs == nil || refs.TableRefs.Right != nil {
		return ""
	}
	ts, ok := refs.TableRefs.Left.(*ast.TableSource)
	if !ok {
		return ""
	}
	tn, ok := ts.Source.(*ast.TableName)
	if !ok {
		return ""
	}
	if tn.Schema.L != "" {
		return tn.Schema.L + "." + tn.Name.L
	}
	return tn.Name.L
}

// paramIndex is p's position among the statement's parameter markers in text order (the parser leaves Order at 0
// until a prepare numbers them), or -1 when p is not among them.
func paramIndex(stmt ast.StmtNode, p *test_driver.ParamMarkerExpr) int {
	var pc paramCollector
	stmt.Accept(&pc)
	at, found := 0, false
	for _, o := range pc.offsets {
		switch {
		case o < p.Offset:
			at++
		case o == p.Offset:
			found = true
		}
	}
	if !found {
		return -1
	}
	return at
}

// paramCollector lists the text offsets of a statement's parameter markers.
type paramCollector struct{ offsets []int }

func (c *paramCollector) Enter(n ast.Node) (ast.Node, bool) {
	if p, ok := n.(*test_driver.ParamMarkerExpr); ok {
		c.offsets = append(c.offsets, p.Offset)
	}
	return n, false
}

func (c *paramCollector) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// literalCollector lists a statement's literals in visiting order, and checks that order is text order where
// the parser recorded positions (it does for most literals), so an index means the Nth literal of the text.
type literalCollector struct {
	lits    []*test_driver.ValueExpr
	lastPos int
	ordered bool
	started bool
}

func (l *literalCollector) Enter(n ast.Node) (ast.Node, bool) {
	if v, ok := n.(*test_driver.ValueExpr); ok {
		if !l.started {
			l.started, l.ordered = true, true
		}
		if pos := v.OriginTextPosition(); pos != 0 {
			if pos < l.lastPos {
				l.ordered = false
			}
			l.lastPos = pos
		}
		l.lits = append(l.lits, v)
	}
	return n, false
}

func (l *literalCollector) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// index is v's position among the literals, or -1 when it is not there or the order cannot be vouched for.
func (l *literalCollector) index(v *test_driver.ValueExpr) int {
	if !l.ordered {
		return -1
	}
	for i, x := range l.lits {
		if x == v {
			return i
		}
	}
	return -1
}

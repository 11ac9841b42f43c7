package sqlproxy

// The plan's side of shard routing: where a statement's values for the columns it names by equality come from, so
// that the router (shardroute.go) can take the shard key's value per execution without parsing the statement
// again. The plan does not know the shard map (it is cached per digest and outlives a map reload), so it records
// every candidate: each "column = value" and "column IN (…)" of a WHERE's top-level AND, each column of an
// INSERT's rows, and what would make the statement unroutable whatever the map says.

import (
	"strconv"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// routeRef is how a statement may be routed to one shard (Plan.route).
type routeRef struct {
	// table is the one table the statement reads or writes ("schema.table" or "table", lower-case); "" when it
	// names several (a join) or none.
	table string
	// unroutable says why the statement cannot go to one shard whatever the map: a join, a subquery, several
	// statements, INSERT … SELECT. Empty when it can.
	unroutable string
	// insert: an INSERT or REPLACE; its rows' values are in rows, by column (cols).
	insert bool
	cols   []string
	rows   [][]routeVal
	// eqs are a WHERE's top-level "column = value" and "column IN (…)" conditions.
	eqs []routeEq
	// sets are the columns an UPDATE (or an INSERT's ON DUPLICATE KEY UPDATE) assigns: none may be the shard key.
	sets []string
	// gathers says what a statement run on every shard (scatter) could not answer by concatenating the shards'
	// rows: ORDER BY, LIMIT, GROUP BY, DISTINCT, an aggregate. Empty when concatenation is the answer.
	gathers string
	// ddl: the statement changes the table's definition, so it runs on every shard of the table's mapping.
	ddl bool
	// fast: every literal value's token index was checked against the parse (routeVal.tok), so the values of any
	// statement of this fingerprint can be read from its text without parsing it.
	fast bool
}

// routeEq is one equality condition of a WHERE: column = vals[0], or column IN (vals…).
type routeEq struct {
	column string
	vals   []routeVal
}

// routeVal is where one value comes from: the param-th parameter of an execute (param ≥ 0), or a literal, whose
// text is lit (for the statement this ref was built from) and which is the tok-th literal of the fingerprint's
// token stream (literalSpans) when tok ≥ 0. A negative integer (-5) is a value too, read from the statement's own
// parse. ok is false for anything else (an expression, NULL, a float): a shard key value the router cannot take.
type routeVal struct {
	param, tok int
	pos        int // the literal's offset in the text it was parsed from (0: unknown)
	lit        string
	str        bool // lit is a string literal's content (else a number's text)
	ok         bool
}

// routeOf returns stmts' routeRef; sql is their text (for the literals' token positions).
func routeOf(sql string, stmts []ast.StmtNode) *routeRef {
	r := &routeRef{}
	if len(stmts) != 1 {
		r.unroutable = "several statements in one query"
		return r
	}
	var sub subqueryFinder
	stmts[0].Accept(&sub)
	val := func(e ast.ExprNode) routeVal { return routeValue(stmts[0], e) }
	switch s := stmts[0].(type) {
	case *ast.SelectStmt:
		r.table = singleTable(s.From)
		r.eqs = whereEqs(s.Where, val)
		switch {
		case s.GroupBy != nil || s.Having != nil:
			r.gathers = "GROUP BY"
		case s.OrderBy != nil:
			r.gathers = "ORDER BY"
		case s.Limit != nil:
			r.gathers = "LIMIT"
		case s.Distinct:
			r.gathers = "DISTINCT"
		case hasAggregate(s):
			r.gathers = "an aggregate function"
		}
		if s.With != nil || s.Kind != ast.SelectStmtKindSelect {
			r.unroutable = "a WITH, TABLE or VALUES statement"
		}
	case *ast.SetOprStmt:
		r.unroutable = "a UNION"
	case *ast.UpdateStmt:
		if !s.MultipleTable {
			r.table = singleTable(s.TableRefs)
		}
		r.eqs = whereEqs(s.Where, val)
		for _, a := range s.List {
			r.sets = append(r.sets, a.Column.Name.L)
		}
	case *ast.DeleteStmt:
		if !s.IsMultiTable {
			r.table = singleTable(s.TableRefs)
		}
		r.eqs = whereEqs(s.Where, val)
	case *ast.InsertStmt:
		r.insert = true
		r.table = singleTable(s.Table)
		switch {
		case s.Select != nil:
			r.unroutable = "INSERT … SELECT (the rows' shards are not known before they are read)"
		default: // VALUES rows, or INSERT … SET (one row)
			for _, c := range s.Columns {
				r.cols = append(r.cols, c.Name.L)
			}
			for _, l := range s.Lists {
				row := make([]routeVal, 0, len(l))
				for _, e := range l {
					row = append(row, val(e))
				}
				r.rows = append(r.rows, row)
			}
		}
		for _, a := range s.OnDuplicate {
			r.sets = append(r.sets, a.Column.Name.L)
		}
	case ast.DDLNode:
		r.ddl = true
	}
	if r.unroutable == "" && sub.found {
		r.unroutable = "a subquery"
	}
	if r.unroutable == "" && r.table == "" && !r.ddl {
		r.unroutable = "a join or a statement without one table"
	}
	r.fast = fastValues(sql, r)
	return r
}

// whereEqs lists where's top-level equality conditions on a column.
func whereEqs(where ast.ExprNode, val func(ast.ExprNode) routeVal) []routeEq {
	var eqs []routeEq
	var walk func(e ast.ExprNode)
	walk = func(e ast.ExprNode) {
		switch x := e.(type) {
		case *ast.ParenthesesExpr:
			walk(x.Expr)
		case *ast.BinaryOperationExpr:
			switch x.Op {
			case opcode.LogicAnd:
				walk(x.L)
				walk(x.R)
			case opcode.EQ:
				col, v := x.L, x.R
				if _, isCol := col.(*ast.ColumnNameExpr); !isCol {
					col, v = v, col
				}
				if c, ok := col.(*ast.ColumnNameExpr); ok {
					eqs = append(eqs, routeEq{column: c.Name.Name.L, vals: []routeVal{val(v)}})
				}
			}
		case *ast.PatternInExpr:
			c, ok := x.Expr.(*ast.ColumnNameExpr)
			if !ok || x.Not || x.Sel != nil {
				return
			}
			eq := routeEq{column: c.Name.Name.L}
			for _, v := range x.List {
				eq.vals = append(eq.vals, val(v))
			}
			eqs = append(eqs, eq)
		}
	}
	if where != nil {
		walk(where)
	}
	return eqs
}

// routeValue is where value expression e of stmt comes from.
func routeValue(stmt ast.StmtNode, e ast.ExprNode) routeVal {
	v := routeVal{param: -1, tok: -1}
	switch x := e.(type) {
	case *test_driver.ParamMarkerExpr:
		v.param = paramIndex(stmt, x)
		v.ok = v.param >= 0
	case *ast.UnaryOperationExpr: // -5: a negative key, for range_int (its text is parsed per execution)
		if in, isLit := x.V.(*test_driver.ValueExpr); isLit && x.Op == opcode.Minus {
			switch in.Datum.Kind() {
			case test_driver.KindInt64:
				v.lit, v.ok = strconv.FormatInt(-in.Datum.GetInt64(), 10), true
			case test_driver.KindUint64:
				if u := in.Datum.GetUint64(); u <= 1<<63 {
					v.lit, v.ok = "-"+strconv.FormatUint(u, 10), true
				}
			}
		}
	case *test_driver.ValueExpr:
		switch x.Datum.Kind() {
		case test_driver.KindInt64:
			v.lit, v.ok = strconv.FormatInt(x.Datum.GetInt64(), 10), true
		case test_driver.KindUint64:
			v.lit, v.ok = strconv.FormatUint(x.Datum.GetUint64(), 10), true
		case test_driver.KindString:
			v.lit, v.str, v.ok = x.Datum.GetString(), true, true
		}
		v.pos = x.OriginTextPosition() // fastValues finds the fingerprint's literal there
	}
	return v
}

// fastValues finds each literal value of r among sql's fingerprint literals (literalSpans), by its position,
// checks that the token reads as the parser read it, and reports whether every literal could be mapped, so that a statement of the same fingerprint can be read by token alone. An IN list that collapsed, or
// rows of several values (an INSERT's rows collapse alike), make statements of one fingerprint differ in their
// number of literals: those are parsed per execution.
func fastValues(sql string, r *routeRef) bool {
	spans, collapsed := literalSpans(sql)
	if collapsed || len(r.rows) > 1 {
		return false
	}
	check := func(v *routeVal) bool {
		if !v.ok || v.param >= 0 {
			return true
		}
		for j, sp := range spans {
			if v.pos > 0 && sp[0] == v.pos {
				text, str, ok := literalText(sql[sp[0]:sp[1]])
				if ok && text == v.lit && str == v.str {
					v.tok = j
					return true
				}
			}
		}
		return false
	}
	for i := range r.eqs {
		for j := range r.eqs[i].vals {
			if !check(&r.eqs[i].vals[j]) {
				return false
			}
		}
	}
	for i := range r.rows {
		for j := range r.rows[i] {
			if !check(&r.rows[i][j]) {
				return false
			}
		}
	}
	return true
}

// literalText reads a fingerprint literal token as a shard key value: a decimal integer as written, or a quoted
// string's content (backslash escapes and doubled quotes undone). ok is false for anything else (a decimal point,
// an exponent, hex, a string with an escape other than a quote or backslash, which the router then parses).
func literalText(tok string) (text string, str bool, ok bool) {
	if tok == "" {
		return "", false, false
	}
	if q := tok[0]; q == '\'' || q == '"' {
		if len(tok) < 2 || tok[len(tok)-1] != q {
			return "", false, false
		}
		body := tok[1 : len(tok)-1]
		plain := true
		for i := 0; i < len(body); i++ {
			if body[i] == '\\' || body[i] == q {
				plain = false
				break
			}
		}
		if plain {
			return body, true, true
		}
		b := make([]byte, 0, len(body))
		for i := 0; i < len(body); i++ {
			c := body[i]
			switch {
			case c == '\\' && i+1 < len(body) && (body[i+1] == '\\' || body[i+1] == '\'' || body[i+1] == '"'):
				i++
				b = append(b, body[i])
			case c == '\\':
				return "", false, false
			case c == q && i+1 < len(body) && body[i+1] == q:
				i++
				b = append(b, q)
			default:
				b = append(b, c)
			}
		}
		return string(b), true, true
	}
	if _, ok := decimalKey(tok); !ok {
		return "", false, false
	}
	return tok, false, true
}

// subqueryFinder notes a subquery anywhere in a statement.
type subqueryFinder struct{ found bool }

func (f *subqueryFinder) Enter(n ast.Node) (ast.Node, bool) {
	if _, ok := n.(*ast.SubqueryExpr); ok {
		f.found = true
	}
	return n, f.found
}

func (f *subqueryFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// hasAggregate reports whether s's fields call an aggregate function (COUNT, SUM…), whose answer over several
// shards is not the concatenation of theirs.
func hasAggregate(s *ast.SelectStmt) bool {
	if s.Fields == nil {
		return false
	}
	var f aggregateFinder
	for _, fd := range s.Fields.Fields {
		if fd.Expr != nil {
			fd.Expr.Accept(&f)
		}
	}
	return f.found
}

type aggregateFinder struct{ found bool }

func (f *aggregateFinder) Enter(n ast.Node) (ast.Node, bool) {
	switch n.(type) {
	case *ast.AggregateFuncExpr, *ast.WindowFuncExpr:
		f.found = true
	}
	return n, f.found
}

func (f *aggregateFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// Package sqlnames finds the tables an SQL statement names, from the TiDB parser's syntax tree. The SQL door's
// planner and the binlog follower (DDL in query events) share it, so "which tables does this statement touch" has
// one answer. It resolves no default database: package validity applies the naming rule to what it returns.
//
// Invariant: a name that is a CTE or an alias of a table is never reported as a table; every real table is.
package sqlnames

import (
	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Collector walks statements and records every table they name (every ast.TableName, which covers FROM lists,
// joins, subqueries, INSERT … SELECT, multi-table UPDATE/DELETE, DDL targets, SHOW … FROM t and LOCK TABLES),
// in statement order, each once. The zero Collector is ready to use.
type Collector struct {
	seen   map[string]struct{}
	tables []string
	skip   map[*ast.TableName]struct{} // names that are aliases, not tables (DELETE a FROM t AS a)
	ctes   map[string]struct{}         // WITH names; an unqualified TableName with such a name is not a table
}

// Collect adds the tables st names.
func (tc *Collector) Collect(st ast.StmtNode) {
	if tc.seen == nil {
		tc.seen = map[string]struct{}{}
	}
	tc.skip, tc.ctes = nil, nil
	// First pass: learn CTE names, so "WITH x AS (…) SELECT … FROM x" does not report x.
	st.Accept(&cteFinder{tc: tc})
	st.Accept(tc)
}

func (tc *Collector) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.InsertStmt:
		// The visitor walks INSERT's SELECT before its target; record the target first so Tables reads in
		// statement order.
		if x.Table != nil && x.Table.TableRefs != nil {
			if ts, ok := x.Table.TableRefs.Left.(*ast.TableSource); ok {
				if tn, ok := ts.Source.(*ast.TableName); ok {
					tc.Enter(tn)
				}
			}
		}
	case *ast.DeleteStmt:
		// In multi-table DELETE the target list holds aliases of tables named in TableRefs; the real tables are
		// found there.
		if x.IsMultiTable && x.Tables != nil {
			if tc.skip == nil {
				tc.skip = map[*ast.TableName]struct{}{}
			}
			for _, t := range x.Tables.Tables {
				tc.skip[t] = struct{}{}
			}
		}
	case *ast.TableName:
		if _, ok := tc.skip[x]; ok {
			return n, true
		}
		name := x.Name.L
		if name == "" {
			return n, true
		}
		if x.Schema.L == "" {
			if _, ok := tc.ctes[name]; ok {
				return n, true
			}
		} else {
			name = x.Schema.L + "." + name
		}
		if _, ok := tc.seen[name]; !ok {
			tc.seen[name] = struct{}{}
			tc.tables = append(tc.tables, name)
		}
		return n, true
	}
	return n, false
}

func (tc *Collector) Leave(n ast.Node) (ast.Node, bool) { return n, true }

type cteFinder struct{ tc *Collector }

func (f *cteFinder) Enter(n ast.Node) (ast.Node, bool) {
	if w, ok := n.(*ast.WithClause); ok {
		for _, c := range w.CTEs {
			if c == nil {
				continue
			}
			if f.tc.ctes == nil {
				f.tc.ctes = map[string]struct{}{}
			}
			f.tc.ctes[c.Name.L] = struct{}{}
		}
	}
	return n, false
}

func (f *cteFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// Tables are the names collected so far, "schema.table" or a bare "table" as the statements wrote them,
// lower-cased.
func (tc *Collector) Tables() []string { return tc.tables }

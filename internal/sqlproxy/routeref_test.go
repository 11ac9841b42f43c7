package sqlproxy

import (
	"fmt"
	"testing"
)

func TestRouteOf(t *testing.T) {
	pc := NewPlanCache(100)
	type eq struct {
		col  string
		vals []string // "p0" for parameter 0, else the literal's text
	}
	cases := []struct {
		sql        string
		table      string
		unroutable bool
		eqs        []eq
		cols       []string
		rows       [][]string
		sets       []string
		gathers    string
		fast       bool
	}{
		{sql: "SELECT * FROM t WHERE id = 5", table: "t", eqs: []eq{{"id", []string{"5"}}}, fast: true},
		{sql: "select a from app.t where x > 3 and (id = ? and name = 'bo''b')", table: "app.t",
			eqs: []eq{{"id", []string{"p0"}}, {"name", []string{"bo'b"}}}, fast: true},
		{sql: "SELECT * FROM t WHERE 7 = id OR id = 8", table: "t", fast: true},
		{sql: "SELECT * FROM t WHERE id = -5", table: "t", eqs: []eq{{"id", []string{"-5"}}}},
		{sql: "SELECT * FROM t WHERE id IN (1, 2, 3)", table: "t", eqs: []eq{{"id", []string{"1", "2", "3"}}}},
		{sql: "SELECT * FROM t WHERE id = 5 ORDER BY a", table: "t", eqs: []eq{{"id", []string{"5"}}}, gathers: "ORDER BY", fast: true},
		{sql: "SELECT count(*) FROM t", table: "t", gathers: "an aggregate function", fast: true},
		{sql: "SELECT * FROM t JOIN u ON t.a = u.a WHERE t.id = 1", unroutable: true},
		{sql: "SELECT * FROM t WHERE id = (SELECT max(id) FROM t)", table: "t", unroutable: true},
		{sql: "UPDATE t SET a = 1, id = 2 WHERE id = 3", table: "t", eqs: []eq{{"id", []string{"3"}}}, sets: []string{"a", "id"}, fast: true},
		{sql: "DELETE FROM t WHERE id = 'x'", table: "t", eqs: []eq{{"id", []string{"x"}}}, fast: true},
		{sql: "INSERT INTO t (id, a) VALUES (10, 'a')", table: "t", cols: []string{"id", "a"}, rows: [][]string{{"10", "a"}}, fast: true},
		{sql: "INSERT INTO t (id, a) VALUES (?, ?), (11, 'b') ON DUPLICATE KEY UPDATE a = 'c'", table: "t", cols: []string{"id", "a"},
			rows: [][]string{{"p0", "p1"}, {"11", "b"}}, sets: []string{"a"}},
		{sql: "INSERT INTO t SET id = 12, a = 'x'", table: "t", cols: []string{"id", "a"}, rows: [][]string{{"12", "x"}}, fast: true},
		{sql: "INSERT INTO t (id) SELECT id FROM u", table: "t", unroutable: true},
		{sql: "SELECT * FROM t WHERE id = 1; SELECT 2", unroutable: true},
	}
	for _, c := range cases {
		plan := pc.Plan(c.sql)
		r := plan.route
		if r == nil {
			t.Errorf("%s: no route", c.sql)
			continue
		}
		if (r.unroutable != "") != c.unroutable || r.table != c.table && !c.unroutable {
			t.Errorf("%s: table %q unroutable %q", c.sql, r.table, r.unroutable)
		}
		if c.unroutable {
			continue
		}
		if r.gathers != c.gathers || r.fast != c.fast {
			t.Errorf("%s: gathers %q fast %v", c.sql, r.gathers, r.fast)
		}
		text := func(v routeVal) string {
			if v.param >= 0 {
				return "p" + string(rune('0'+v.param))
			}
			return v.lit
		}
		var got []eq
		for _, e := range r.eqs {
			g := eq{col: e.column}
			for _, v := range e.vals {
				g.vals = append(g.vals, text(v))
			}
			got = append(got, g)
		}
		if len(got) != len(c.eqs) || len(got) > 0 && fmtAny(got) != fmtAny(c.eqs) {
			t.Errorf("%s: eqs %v, want %v", c.sql, got, c.eqs)
		}
		var rows [][]string
		for _, row := range r.rows {
			var g []string
			for _, v := range row {
				g = append(g, text(v))
			}
			rows = append(rows, g)
		}
		if fmtAny(rows) != fmtAny(c.rows) || fmtAny(r.cols) != fmtAny(c.cols) || fmtAny(r.sets) != fmtAny(c.sets) {
			t.Errorf("%s: cols %v rows %v sets %v", c.sql, r.cols, rows, r.sets)
		}
	}
}

func TestLiteralText(t *testing.T) {
	for tok, want := range map[string]string{"123": "123", "'abc'": "abc", `'a\'b'`: "a'b", `"x""y"`: `x"y`, "''": ""} {
		if got, _, ok := literalText(tok); !ok || got != want {
			t.Errorf("literalText(%s) = %q %v, want %q", tok, got, ok, want)
		}
	}
	for _, tok := range []string{"1.5", "0x1F", `'a\nb'`, "1e3"} {
		if _, _, ok := literalText(tok); ok {
			t.Errorf("literalText(%s) ok", tok)
		}
	}
}

func fmtAny(v any) string { return fmt.Sprint(v) }

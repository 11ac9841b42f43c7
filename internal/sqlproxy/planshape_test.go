package sqlproxy

import (
	"reflect"
	"testing"
)

func TestPlanShape(t *testing.T) {
	cases := []struct {
		sql          string
		cacheable    bool
		notCacheable string
		key          *KeyRef
	}{
		{"SELECT * FROM t WHERE id = 5", true, "", &KeyRef{Table: "t", Column: "id", Literal: 0, Param: -1}},
		{"SELECT a, 'x' FROM Shop.T WHERE 'k1' = Name LIMIT 1", true, "", &KeyRef{Table: "shop.t", Column: "name", Literal: 1, Param: -1}},
		{"SELECT a FROM t WHERE id = ?", true, "", &KeyRef{Table: "t", Column: "id", Literal: -1, Param: 0}},
		{"UPDATE t SET v = 'x' WHERE k = 'a'", false, "not a SELECT", &KeyRef{Table: "t", Column: "k", Literal: 1, Param: -1}},
		{"DELETE FROM db.t WHERE k = ?", false, "not a SELECT", &KeyRef{Table: "db.t", Column: "k", Literal: -1, Param: 0}},
		{"SELECT * FROM t WHERE id IN (1, 2, 3)", true, "", &KeyRef{Table: "t", Column: "id", Literal: 0, Param: -1, In: 3}},
		{"SELECT * FROM t WHERE id IN (?, ?)", true, "", &KeyRef{Table: "t", Column: "id", Literal: -1, Param: 0, In: 2}},
		{"SELECT * FROM t WHERE id IN (1, ?)", true, "", nil},
		{"SELECT ?, v FROM t WHERE id = ? LIMIT ?", true, "", &KeyRef{Table: "t", Column: "id", Literal: -1, Param: 1}},
		{"SELECT v FROM t WHERE id IN (?, ?) LIMIT ?", true, "", &KeyRef{Table: "t", Column: "id", Literal: -1, Param: 0, In: 2}},
		{"SELECT * FROM t WHERE id NOT IN (1, 2)", true, "", nil},
		{"SELECT * FROM t WHERE id = 1 AND b = 2", true, "", nil},
		{"SELECT * FROM t JOIN u ON t.id = u.id WHERE t.id = 1", true, "", nil},
		{"SELECT * FROM t WHERE id > 1", true, "", nil},
		{"SELECT * FROM t WHERE id = 1 FOR UPDATE", false, "a locking read (FOR UPDATE / LOCK IN SHARE MODE)", &KeyRef{Table: "t", Column: "id", Literal: 0, Param: -1}},
		{"SELECT SQL_NO_CACHE * FROM t", false, "SQL_NO_CACHE", nil},
		{"SELECT NOW(), a FROM t", false, "calls NOW()", nil},
		{"SELECT a FROM t WHERE b = @v", false, "reads a variable", nil},
		{"SELECT 1", true, "", nil},
		{"SELECT (1 + 2) * -3, 'x'", true, "", nil},
		{"SELECT NEXTVAL(s)", false, "calls NEXTVAL()", nil},
		{"SELECT LOAD_FILE('/etc/hostname')", false, "reads no table and is not a constant", nil},
		{"SELECT (SELECT 1)", false, "reads no table and is not a constant", nil},
		{"SELECT @@sql_mode", false, "reads no table and is not a constant", nil},
		{"SELECT * FROM information_schema.tables", false, "reads a system schema (information_schema)", nil},
		{"SELECT 1; SELECT 2", false, "several statements", nil},
		{"BEGIN", false, "not a SELECT", nil},
		{"SELEKT nonsense", false, "not parsed", nil},
	}
	pc := NewPlanCache(100)
	for _, c := range cases {
		p := pc.Plan(c.sql)
		if p.Cacheable != c.cacheable || p.NotCacheable != c.notCacheable || !reflect.DeepEqual(p.Key, c.key) {
			t.Errorf("%s: cacheable %v %q key %+v; want %v %q %+v", c.sql, p.Cacheable, p.NotCacheable, p.Key, c.cacheable, c.notCacheable, c.key)
		}
	}
}

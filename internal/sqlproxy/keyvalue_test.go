package sqlproxy

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/mysql"
)

// paramValue finds an integer parameter behind parameters of other types, sign-extends signed ones, and refuses
// NULL and non-integers.
func TestParamValue(t *testing.T) {
	// Four parameters: a string "abc", NULL, a signed SHORT -2, an unsigned LONGLONG 2^63.
	nulls := []byte{0b0010}
	types := []byte{mysql.TypeVarString, 0, mysql.TypeLonglong, 0, mysql.TypeShort, 0, mysql.TypeLonglong, 0x80}
	values := []byte{3, 'a', 'b', 'c'}
	values = binary.LittleEndian.AppendUint16(values, uint16(0xfffe))
	values = binary.LittleEndian.AppendUint64(values, 1<<63)
	params := append(append(append([]byte{}, nulls...), types...), values...)
	for _, tc := range []struct {
		n    int
		want any
		ok   bool
	}{
		{0, nil, false}, // a string
		{1, nil, false}, // NULL
		{2, int64(-2), true},
		{3, uint64(1 << 63), true},
		{4, nil, false}, // no such parameter
	} {
		got, ok := paramValue(4, tc.n, params)
		if ok != tc.ok || got != tc.want {
			t.Errorf("param %d = %v %v, want %v %v", tc.n, got, ok, tc.want, tc.ok)
		}
	}
}

// KeyValues reads the key literals of this statement's own text, integers only.
func TestKeyValues(t *testing.T) {
	pc := NewPlanCache(16)
	for sql, want := range map[string][]any{
		"SELECT v FROM t WHERE id = 42":                   {int64(42)},
		"SELECT v FROM t WHERE 18446744073709551615 = id": {uint64(18446744073709551615)},
		"SELECT 'a', 7 FROM t WHERE id = 5 LIMIT 1":       {int64(5)},
		"SELECT v FROM t WHERE id IN (3, 1, 2)":           {int64(3), int64(1), int64(2)},
		"SELECT v FROM t WHERE id IN (3, '1')":            nil,
		"SELECT v FROM t WHERE id NOT IN (3)":             nil,
		"SELECT v FROM t WHERE id = '42'":                 nil,
		"SELECT v FROM t WHERE id = 4.2":                  nil,
		"SELECT v FROM t WHERE id = -4":                   nil,
		"SELECT v FROM t WHERE id > 4":                    nil,
	} {
		got, ok := pc.KeyValues(sql, pc.Plan(sql))
		if ok != (want != nil) || !slices.Equal(got, want) {
			t.Errorf("KeyValues(%q) = %v %v, want %v", sql, got, ok, want)
		}
	}
}

// The fingerprint's literal (Plan.keyToken) and the parser agree on the key of every statement sharing a plan,
// whatever the other literals around it: concatenated strings, NULL and TRUE (literals to the parser, words to the
// fingerprint), literals in executable comments, IN lists that collapse, leading zeros, values past int64.
func TestKeyTokenAgreesWithParser(t *testing.T) {
	templates := []struct {
		sql  string
		fast bool // the plan reads the key without parsing
		max  int  // literals are drawn below it (1000 when 0)
	}{
		{"SELECT v FROM t WHERE id = %d", true, 0},
		{"SELECT 'a' 'b', %d FROM t WHERE id = %d LIMIT %d", true, 0},
		{"SELECT NULL, TRUE, %d FROM t WHERE id = %d", true, 0},
		{"SELECT /*+ keyway cache ttl=60 */ v, %d FROM t WHERE %d = id", true, 0},
		{"SELECT /*! 7, */ v, %d FROM t WHERE id = %d", true, 0},
		{"SELECT x'41', 0x10, .5, 1e3, %d FROM t WHERE id = %d", true, 0},
		{"SELECT v, %d IN (1, 2, 3) FROM t WHERE id = %d", false, 0},
		{"SELECT v FROM t WHERE id = 00%d", true, 0},
		{"SELECT v FROM t WHERE id = 1000000000000000000%d", true, 10}, // past int64, within uint64
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range templates {
		pc := NewPlanCache(16)
		n := strings.Count(tc.sql, "%d")
		fill := func() string {
			args := make([]any, n)
			for i := range args {
				args[i] = rng.IntN(cmp.Or(tc.max, 1000))
			}
			return fmt.Sprintf(tc.sql, args...)
		}
		first := fill()
		plan := pc.Plan(first)
		if fast := plan.keyToken > 0; fast != tc.fast {
			t.Errorf("%s: fast path %v, want %v", first, fast, tc.fast)
		}
		for range 200 {
			sql := fill()
			if p := pc.Plan(sql); p != plan {
				t.Fatalf("%s and %s do not share a plan", first, sql)
			}
			got, ok := pc.KeyValues(sql, plan)
			stmts, _, err := parser.New().Parse(sql, "", "")
			if err != nil {
				t.Fatal(err)
			}
			want, wantOK := pointKeyValues(stmts)
			if ok != wantOK || !slices.Equal(got, want) {
				t.Fatalf("%s: key %v %v, the parser says %v %v", sql, got, ok, want, wantOK)
			}
		}
	}
}

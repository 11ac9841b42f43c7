package sqlproxy

import (
	"encoding/binary"
	"slices"
	"testing"

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
		got, ok := pc.KeyValues(sql)
		if ok != (want != nil) || !slices.Equal(got, want) {
			t.Errorf("KeyValues(%q) = %v %v, want %v", sql, got, ok, want)
		}
	}
}

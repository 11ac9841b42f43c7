package sqlproxy

import (
	"hash/maphash"
	"testing"

	"github.com/pingcap/tidb/pkg/parser"
)

// fingerprintPairs: statements differing only in literals, whitespace, comments, keyword case or the length of a
// literal IN list share a fingerprint (same); statements differing in structure do not.
var fingerprintPairs = []struct {
	a, b string
	same bool
}{
	{"SELECT c FROM t WHERE id = 1", "select c from t where id = 4711", true},
	{"SELECT c FROM t WHERE id = 1", "SELECT  c\n\tFROM t WHERE id=2", true},
	{"SELECT c FROM t WHERE name = 'a'", `SELECT c FROM t WHERE name = "it's \"b\""`, true},
	{"SELECT c FROM t WHERE x = 1.5", "SELECT c FROM t WHERE x = .5e-3", true},
	{"SELECT c FROM t WHERE x = 0x1F", "SELECT c FROM t WHERE x = x'41'", true},
	{"SELECT c FROM t WHERE x = 1e+5", "SELECT c FROM t WHERE x = 7", true},
	{"SELECT c FROM t WHERE id IN (1, 2)", "SELECT c FROM t WHERE id IN (1, 2, 3, 'x', 5)", true},
	{"SELECT c FROM t WHERE id IN (1)", "SELECT c FROM t WHERE id IN (1, 2)", false}, // as TiDB's digest
	{"SELECT c FROM t WHERE id in(1,2)", "SELECT c FROM t WHERE id IN ( 9 , 8 , 7 ) ", true},
	{"SELECT c FROM t /* a comment */ WHERE id = 1", "SELECT c FROM t WHERE id = 2 -- trailing\n", true},
	{"SELECT c FROM t # hash comment\n WHERE id = 1", "SELECT c FROM t WHERE id = 2", true},

	{"SELECT c FROM t WHERE id = 1", "SELECT c FROM u WHERE id = 1", false},                       // table
	{"SELECT c FROM t WHERE id = 1", "SELECT d FROM t WHERE id = 1", false},                       // column
	{"SELECT c FROM t WHERE id = 1", "SELECT c FROM t WHERE id > 1", false},                       // operator
	{"SELECT c FROM t WHERE id >= 1", "SELECT c FROM t WHERE id > = 1", false},                    // operator spelling
	{"SELECT c FROM t WHERE id = 1", "SELECT /*+ keyway nocache */ c FROM t WHERE id = 1", false}, // hint
	{"SELECT /*+ keyway cache ttl=5 */ c FROM t", "SELECT /*+ keyway cache ttl=9 */ c FROM t", false},
	{"SELECT /*!40001 SQL_NO_CACHE */ c FROM t", "SELECT c FROM t", false},      // executable comment
	{"SELECT c FROM t WHERE id = 1", "SELECT c FROM t WHERE id = ?", false},     // literal vs parameter
	{"SELECT c FROM `t` WHERE id = 1", "SELECT c FROM `u` WHERE id = 1", false}, // quoted identifiers
	{"SELECT c FROM 1t WHERE id = 1", "SELECT c FROM 2t WHERE id = 1", false},   // names starting with a digit
	{"SELECT c FROM 0b12", "SELECT c FROM 0b13", false},                         // not a binary literal
	{"SELECT c FROM t WHERE x = 0b101", "SELECT c FROM t WHERE x = 0b1", true},
	{"SELECT ab FROM t", "SELECT a b FROM t", false},
	{"SELECT @a", "SELECT @ a", false}, // a variable, and not
	{"? ?", "\x01 \x01", false},        // a control byte is not a marker
	{"SELECT @@x", "SELECT @ @x", false},
	{"SELECT t.a FROM t", "SELECT t . a FROM t", true},                                   // word boundaries
	{"SELECT c FROM t WHERE x = -1", "SELECT c FROM t WHERE x = 1", false},               // sign kept, as an operator
	{"SELECT c FROM t WHERE x = x'41'", "SELECT c FROM t WHERE x = x '41'", false},       // hex literal vs alias
	{"SELECT c FROM t WHERE a IN (1, b)", "SELECT c FROM t WHERE a IN (1, 2, b)", false}, // not a literal list
	{"SELECT c FROM t WHERE a IN (1)", "SELECT c FROM t WHERE a IN (1,)", false},
	{"SELECT 1, 2 FROM t", "SELECT 1 FROM t", false}, // only IN lists collapse
	{"SET autocommit = 0; SELECT 1", "SET autocommit = 0", false},
	{"SELECT c FROM t WHERE s = 'a'; DELETE FROM t", "SELECT c FROM t WHERE s = 'a'", false},
}

func TestFingerprint(t *testing.T) {
	seed := maphash.MakeSeed()
	for _, p := range fingerprintPairs {
		fa, fb := fingerprint(seed, p.a), fingerprint(seed, p.b)
		if (fa == fb) != p.same {
			t.Errorf("same=%v, want %v:\n  %q\n  %q", fa == fb, p.same, p.a, p.b)
		}
	}
}

// TestFingerprintNotCoarserThanDigest: statements sharing a fingerprint share one plan, so they must share TiDB's
// normalized text too (the plan is built from the first one seen).
func TestFingerprintNotCoarserThanDigest(t *testing.T) {
	seed := maphash.MakeSeed()
	var corpus []string
	for _, p := range fingerprintPairs {
		corpus = append(corpus, p.a, p.b)
	}
	corpus = append(corpus, "SELECT C FROM T WHERE ID = 1", "select c from t where id = 1", "SELECT `C` FROM t",
		"UPDATE t SET a = 1 WHERE id = 2", "UPDATE t SET a = 'x' WHERE id = 3", "INSERT INTO t VALUES (1, 'a')",
		"INSERT INTO t VALUES (2, 'b'), (3, 'c')", "SET autocommit = 1", "SET autocommit = 0", "BEGIN", "begin",
		"SELECT * FROM t WHERE a IN (SELECT b FROM u WHERE c = 1)", "SELECT * FROM t WHERE a IN (SELECT b FROM u WHERE c = 2)")
	byFP := map[uint64]string{}
	for _, s := range corpus {
		fp := fingerprint(seed, s)
		n, _ := parser.NormalizeDigest(s)
		if prev, ok := byFP[fp]; ok {
			if pn, _ := parser.NormalizeDigest(prev); pn != n {
				t.Errorf("one fingerprint, two normalized statements:\n  %q → %q\n  %q → %q", prev, pn, s, n)
			}
			continue
		}
		byFP[fp] = s
	}
}

// TestPlanFingerprintKeys: statements differing only in literals share one plan (parsed once) and its digest.
func TestPlanFingerprintKeys(t *testing.T) {
	pc := NewPlanCache(100)
	a := pc.Plan("SELECT c FROM t WHERE id IN (1, 2)")
	b := pc.Plan("select c from t where id in (3,4,5,6)")
	if a != b || pc.parses.Load() != 1 {
		t.Fatalf("plans %p %p, %d parses", a, b, pc.parses.Load())
	}
	if a.Fingerprint == 0 || len(a.Digest) != 64 || a.Normalized == "" {
		t.Fatalf("plan %+v", a)
	}
	if c := pc.Plan("SELECT c FROM u WHERE id IN (1, 2)"); c == a || c.Digest == a.Digest {
		t.Fatal("another table shares the plan")
	}
}

// FuzzFingerprint: any input is fingerprinted without a panic, and leading whitespace or a comment does not change
// the fingerprint.
func FuzzFingerprint(f *testing.F) {
	for _, p := range fingerprintPairs {
		f.Add(p.a)
		f.Add(p.b)
	}
	for _, s := range []string{"'", "`", "\"", "/*", "--", "x'", "1e", "1e+", ".", "in (", "in (1,", "\x00", "é"} {
		f.Add(s)
	}
	seed := maphash.MakeSeed()
	f.Fuzz(func(t *testing.T, sql string) {
		if fingerprint(seed, sql) != fingerprint(seed, " /* c */\n\t-- x\n"+sql) {
			t.Errorf("a leading comment changes the fingerprint of %q", sql)
		}
	})
}

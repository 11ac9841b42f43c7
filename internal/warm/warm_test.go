package warm

import (
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/binlog"
)

// A snapshot fits only the groups it was saved with, each binlog group resumed from the saved checkpoint.
func TestMismatch(t *testing.T) {
	cp := &binlog.Checkpoint{Flavor: "mariadb", File: "bin.000001", Pos: 4, GTID: "0-1-5"}
	saved := []Group{{Name: "main", Primary: "db:3306", Mode: "binlog", Checkpoint: cp}, {Name: "ttl", Primary: "db2:3306", Mode: "ttl"}}
	sn := &Snapshot{s: snapshot{Groups: saved}}
	resumed := *cp
	for _, tc := range []struct {
		name    string
		running []Group
		want    string // "" fits, else a part of the reason
	}{
		{"same", []Group{{Name: "ttl", Primary: "db2:3306", Mode: "ttl"}, {Name: "main", Primary: "db:3306", Mode: "binlog", Checkpoint: &resumed}}, ""},
		{"not resumed", []Group{{Name: "main", Primary: "db:3306", Mode: "binlog"}, {Name: "ttl", Primary: "db2:3306", Mode: "ttl"}}, "did not resume"},
		{"other position", []Group{{Name: "main", Primary: "db:3306", Mode: "binlog", Checkpoint: &binlog.Checkpoint{Flavor: "mariadb", GTID: "0-1-6"}}, {Name: "ttl", Primary: "db2:3306", Mode: "ttl"}}, "did not resume"},
		{"moved primary", []Group{{Name: "main", Primary: "other:3306", Mode: "binlog", Checkpoint: &resumed}, {Name: "ttl", Primary: "db2:3306", Mode: "ttl"}}, "groups changed"},
		{"binlog lost", []Group{{Name: "main", Primary: "db:3306", Mode: "off"}, {Name: "ttl", Primary: "db2:3306", Mode: "ttl"}}, "groups changed"},
		{"group added", []Group{{Name: "main", Primary: "db:3306", Mode: "binlog", Checkpoint: &resumed}, {Name: "ttl", Primary: "db2:3306", Mode: "ttl"}, {Name: "x", Primary: "x:1", Mode: "none"}}, "groups changed"},
	} {
		got := sn.mismatch(tc.running)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: mismatch = %q, want %q", tc.name, got, tc.want)
		}
	}
}

package main

import (
	"slices"
	"testing"

	"github.com/keywaydb/keyway/internal/server"
)

// poolsApart names what tells a user's pools apart: the flags some negotiated and others did not, and the
// collation when clients asked for different ones; a pool alone in its group and user gets nothing.
func TestPoolsApartByFlagsAndCollation(t *testing.T) {
	pools := []server.PoolStatus{
		{Group: "main", User: "app", Capabilities: []string{"CLIENT_MULTI_RESULTS", "CLIENT_MULTI_STATEMENTS"}, Collation: 45},
		{Group: "main", User: "app", Capabilities: []string{"CLIENT_MULTI_RESULTS"}, Collation: 33},
		{Group: "main", User: "bi", Capabilities: []string{"CLIENT_MULTI_RESULTS"}, Collation: 45},
		{Group: "main", User: "bi", Capabilities: []string{"CLIENT_MULTI_RESULTS"}, Collation: 8},
		{Group: "main", User: "solo", Capabilities: []string{"CLIENT_MULTI_RESULTS"}, Collation: 33},
	}
	want := []string{"+MULTI_STATEMENTS collation 45  ", "-MULTI_STATEMENTS collation 33  ", "collation 45  ", "collation 8  ", ""}
	if got := poolsApart(pools); !slices.Equal(got, want) {
		t.Fatalf("poolsApart = %q, want %q", got, want)
	}
}

package backend

import (
	"encoding/binary"
	"testing"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// baseState is a connection's state after a handshake with utf8mb4_general_ci.
func baseState() State {
	var s State
	s.Vars = [NumTrackedVars]string{"utf8mb4", "utf8mb4", "utf8mb4", "utf8mb4_general_ci", "STRICT_TRANS_TABLES", "SYSTEM", "ON"}
	s.ResultsCollation = "utf8mb4_general_ci"
	return s
}

// TestSetFor: the statement that brings a connection's variables in line with a session's sets exactly what
// differs, the character sets as SET NAMES would when the three are alike, values quoted as their kind wants.
func TestSetFor(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*State)
		lastID bool
		want   string
	}{
		{"same", func(*State) {}, false, ""},
		{"time_zone", func(s *State) { s.Vars[5] = "+05:00" }, false, "SET SESSION time_zone = '+05:00'"},
		{"quoted", func(s *State) { s.Vars[4] = `ANSI_QUOTES,it's\` }, false, `SET SESSION sql_mode = 'ANSI_QUOTES,it\'s\\'`},
		{"names", func(s *State) {
			s.Vars[0], s.Vars[1], s.Vars[2], s.Vars[3], s.ResultsCollation = "latin1", "latin1", "latin1", "latin1_swedish_ci", "latin1_swedish_ci"
		}, false, "SET NAMES 'latin1' COLLATE 'latin1_swedish_ci'"},
		{"names and more", func(s *State) {
			s.Vars[3], s.ResultsCollation, s.Vars[6] = "utf8mb4_unicode_ci", "utf8mb4_unicode_ci", "OFF"
		}, false, "SET NAMES 'utf8mb4' COLLATE 'utf8mb4_unicode_ci', autocommit = OFF"},
		{"results null", func(s *State) { s.Vars[1], s.ResultsCollation = "", "" }, false, "SET SESSION character_set_results = NULL"},
		{"number", func(s *State) { s.Vars[9] = "4096" }, false, "SET SESSION group_concat_max_len = 4096"},
		{"last insert id, not read", func(s *State) { s.LastInsertID = 7 }, false, ""},
		{"last insert id, read", func(s *State) { s.LastInsertID = 7 }, true, "SET SESSION last_insert_id = 7"},
	} {
		have := &Conn{State: baseState()}
		want := baseState()
		c.change(&want)
		if got := have.setFor(&want, c.lastID); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestNoteOK: what an OK packet's session state tells is recorded, and what cannot be carried is said.
func TestNoteOK(t *testing.T) {
	entry := func(typ byte, parts ...string) []byte {
		var data []byte
		for _, p := range parts {
			data = append(mysqlwire.AppendLenEnc(data, uint64(len(p))), p...)
		}
		return append(mysqlwire.AppendLenEnc([]byte{typ}, uint64(len(data))), data...)
	}
	ok := func(insertID uint64, entries ...[]byte) []byte {
		var state []byte
		for _, e := range entries {
			state = append(state, e...)
		}
		p := mysqlwire.AppendLenEnc(mysqlwire.AppendLenEnc([]byte{mysqlwire.HeaderOK}, 0), insertID)
		p = binary.LittleEndian.AppendUint16(p, mysqlwire.StatusSessionStateChanged|mysqlwire.StatusAutocommit)
		p = append(p, 0, 0) // warnings
		p = append(p, 0)    // empty info
		return append(mysqlwire.AppendLenEnc(p, uint64(len(state))), state...)
	}
	c := &Conn{State: baseState()}
	n, err := c.NoteOK(ok(0, entry(mysqlwire.SessionTrackSystemVariables, "time_zone", "+01:00"), entry(mysqlwire.SessionTrackSchema, "shop")))
	if err != nil || n != (Note{}) || c.State.Vars[5] != "+01:00" || c.State.DB != "shop" {
		t.Fatalf("time_zone and schema: %+v %v %+v", n, err, c.State)
	}
	if n, _ := c.NoteOK(ok(0, entry(mysqlwire.SessionTrackSystemVariables, "wait_timeout", "5"))); n.Untracked != "wait_timeout" {
		t.Errorf("an untracked variable: %+v", n)
	}
	if n, _ := c.NoteOK(ok(0, []byte{mysqlwire.SessionTrackStateChange, 1, '1'})); !n.Unexplained {
		t.Errorf("a bare state change: %+v", n)
	}
	if c.NoteOK(ok(42)); c.State.LastInsertID != 42 {
		t.Errorf("insert id: %d", c.State.LastInsertID)
	}
	c.NoteOK(ok(0, entry(mysqlwire.SessionTrackSystemVariables, "character_set_client", "latin1", "character_set_connection", "latin1", "character_set_results", "latin1")))
	if !c.rereadCollation || !c.namesCollation || c.State.ResultsCollation != "" {
		t.Errorf("SET NAMES: reread %v names %v results collation %q", c.rereadCollation, c.namesCollation, c.State.ResultsCollation)
	}
}

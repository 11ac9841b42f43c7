package backend

// This file is the session state a backend connection carries between the statements of the SQL door's sessions,
// and how keyway brings a borrowed connection in line with the session that borrows it.
//
// Every connection a pool dials negotiates CLIENT_SESSION_TRACK and sets session_track_system_variables = '*',
// session_track_schema and session_track_state_change, so the server reports in its OK packets every system
// variable a statement set (with the value it took), every change of the default database, and a bare "state
// changed" flag for everything else (user variables, temporary tables, PREPARE). keyway never evaluates a SET
// itself: Conn.NoteOK records what the server says. A session's state is simply the state of the connection its
// last statement ran on; Pool.Lease brings the next connection in line with it: one SET for the variables that
// differ, COM_INIT_DB for the database, and SET last_insert_id when the statement reads it.
//
// trackedVars is the one table of the variables carried this way and how each is applied. A variable the server
// reports that is not in it cannot be carried: the session is pinned (Untracked).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// varKind is how a tracked variable's reported value is written back in a SET.
type varKind uint8

const (
	varString     varKind = iota // quoted: 'value'
	varStringNull                // quoted, or NULL when the server reports it empty (character_set_results = NULL)
	varNumber                    // unquoted digits (and a decimal point)
	varBool                      // ON / OFF, unquoted
)

// trackedVar is one session variable keyway carries across connections.
type trackedVar struct {
	name string
	kind varKind
}

// trackedVars are the session variables keyway carries from connection to connection, in the order a fix-up sets
// them: the character sets before collation_connection (setting character_set_connection resets the collation to
// the character set's default). These are what the common clients set at connect (SET NAMES, SET CHARACTER SET,
// sql_mode, time_zone, autocommit, the isolation level) and a few more that change what a statement does.
var trackedVars = [...]trackedVar{
	{"character_set_client", varString},
	{"character_set_results", varStringNull},
	{"character_set_connection", varString},
	{"collation_connection", varString},
	{"sql_mode", varString},
	{"time_zone", varString},
	{"autocommit", varBool},
	{"tx_isolation", varString},
	{"tx_read_only", varBool},
	{"group_concat_max_len", varNumber},
	{"max_statement_time", varNumber},
	{"sql_select_limit", varNumber},
	{"div_precision_increment", varNumber},
	{"big_tables", varBool},
	{"sql_big_selects", varBool},
	{"sql_safe_updates", varBool},
	{"foreign_key_checks", varBool},
	{"unique_checks", varBool},
}

// Indexes of the variables keyway reads itself (see State and NoteOK).
const (
	varCharsetResults      = 1
	varCharsetConnection   = 2
	varCollationConnection = 3
	varSQLMode             = 4
	// NumTrackedVars is len(trackedVars).
	NumTrackedVars = len(trackedVars)
)

// ignoredVars are variables the server reports that need no carrying: their value follows from something keyway
// carries (the default database's character set), or they are keyway's own tracking settings, which keyway sets on
// every connection it dials, or last_insert_id, which State carries apart.
var ignoredVars = map[string]bool{
	"character_set_database": true, "collation_database": true,
	"session_track_system_variables": true, "session_track_schema": true, "session_track_state_change": true,
}

// ResultVars are the indexes of the tracked variables that change the bytes of a reply to the same statement, for
// the SQL result cache's key: character sets and collations, sql_mode and time_zone.
var ResultVars = [...]int{0, 1, 2, 3, 4, 5, 11, 12}

var trackedIndex = func() map[string]int {
	m := make(map[string]int, len(trackedVars))
	for i, v := range trackedVars {
		m[v.name] = i
	}
	return m
}()

// State is the session state a connection has, or that a session wants of the connection it borrows.
type State struct {
	// DB is the default database ("" = none).
	DB string
	// Vars are the tracked variables' values, as the server reports them, in trackedVars order. An empty
	// collation_connection means "the default of character_set_connection": SET NAMES changes the collation without
	// reporting it.
	Vars [NumTrackedVars]string
	// LastInsertID is what LAST_INSERT_ID() returns: the last value an OK packet reported (or SET last_insert_id).
	LastInsertID uint64
	// ResultsCollation is the collation character_set_results has when it is not its character set's default:
	// after SET NAMES cs COLLATE co, or a handshake's collation (it decides the character set number of every
	// column definition). "" means the default.
	ResultsCollation string
	// LastGTID is the GTID of the session's last write as MariaDB reports it (last_gtid): not set on another
	// connection, only recorded, for reads that must see that write.
	LastGTID string
}

// Note is what an OK packet told about a connection's state beyond what NoteOK recorded.
type Note struct {
	// Untracked names a variable that was set and is not in trackedVars ("" = none): its value cannot be carried.
	Untracked string
	// Unexplained: the server flagged a session-state change and reported no variable or database: user
	// variables, temporary tables, PREPARE, none of which keyway can carry.
	Unexplained bool
}

// NoteOK records in c.State the session-state changes of OK packet p (read on c, which tracks them) and returns
// what it could not record. p is the payload, as ParseOK takes it.
func (c *Conn) NoteOK(p []byte) (Note, error) {
	ok, err := mysqlwire.ParseOK(p, mysqlwire.ClientSessionTrack)
	if err != nil {
		return Note{}, err
	}
	return c.noteOK(&ok)
}

func (c *Conn) noteOK(ok *mysqlwire.OK) (Note, error) {
	var n Note
	c.NoteInsertID(ok.LastInsertID)
	if ok.Status&mysqlwire.StatusSessionStateChanged == 0 {
		return n, nil
	}
	explained := false
	charsetOnly := false // character_set_connection changed and collation_connection was not reported with it
	var charsets [3]bool // which of character_set_client, _results and _connection the packet reports
	err := ok.SessionChanges(func(sc mysqlwire.SessionChange) bool {
		switch sc.Type {
		case mysqlwire.SessionTrackSchema:
			c.State.DB, c.DBKnown = string(sc.Value), true
			explained = true
		case mysqlwire.SessionTrackSystemVariables:
			explained = true
			name := string(sc.Name)
			if i, ok := trackedIndex[name]; ok {
				c.State.Vars[i] = string(sc.Value)
				if i < len(charsets) {
					charsets[i] = true
				}
				switch i {
				case varCharsetConnection:
					charsetOnly = true
				case varCollationConnection:
					charsetOnly = false
				}
				return true
			}
			switch name {
			case "last_insert_id":
				if v, err := strconv.ParseUint(string(sc.Value), 10, 64); err == nil {
					c.State.LastInsertID = v
					c.insertIDs++
				}
				return true
			case "last_gtid":
				c.State.LastGTID = string(sc.Value)
				return true
			}
			if !ignoredVars[name] && n.Untracked == "" {
				n.Untracked = name
			}
		}
		return true
	})
	if charsetOnly {
		// SET NAMES cs [COLLATE co] and SET CHARACTER SET report the character sets, not the collation they set:
		// read it (before the connection serves anything else).
		c.rereadCollation = true
	}
	if charsets[varCharsetResults] {
		// SET NAMES cs COLLATE co gives character_set_results collation co too (the column definitions' character
		// set): the collation read back is it when the three were set alike; else results has cs's default.
		v := c.State.Vars
		c.State.ResultsCollation = ""
		c.namesCollation = charsets == [3]bool{true, true, true} && v[0] == v[1] && v[1] == v[2] && charsetOnly
	}
	n.Unexplained = !explained
	return n, err
}

// NoteInsertID records the insert id of an OK packet read on c: a statement that generated one sets
// LAST_INSERT_ID() (0: it generated none, and LAST_INSERT_ID() keeps its value).
func (c *Conn) NoteInsertID(id uint64) {
	if id != 0 {
		c.State.LastInsertID = id
		c.insertIDs++
	}
}

// InsertIDs counts the statements on c that set LAST_INSERT_ID(): a session that borrowed c takes c's value as
// its own only when the count moved while it held c. (The value alone cannot tell: a borrowed connection keeps
// another session's value unless the statement reads it, Needs.LastInsertID.)
func (c *Conn) InsertIDs() uint64 { return c.insertIDs }

// Settle reads back what NoteOK could not learn from the OK packets (the collation after SET NAMES), so that
// c.State is whole before another statement runs on c. A failure marks c broken.
func (c *Conn) Settle() error {
	if !c.rereadCollation {
		return nil
	}
	c.rereadCollation = false
	v, err := c.queryStrings("SELECT @@collation_connection")
	if err != nil {
		c.broken = true
		return err
	}
	c.State.Vars[varCollationConnection] = v[0]
	if c.namesCollation {
		c.State.ResultsCollation, c.namesCollation = v[0], false
	}
	return nil
}

// trackingSetup is what every pooled connection runs after its login: report every variable, the database and
// other state changes (see the file comment).
const trackingSetup = "SET SESSION session_track_system_variables = '*', session_track_schema = ON, session_track_state_change = ON"

// readState turns on session tracking on a new (or just reset) connection and reads its state.
func (c *Conn) readState() error {
	if err := c.exec(trackingSetup); err != nil {
		return err
	}
	var q strings.Builder
	q.WriteString("SELECT DATABASE()")
	for _, v := range trackedVars {
		q.WriteString(", @@session.")
		q.WriteString(v.name)
	}
	vals, err := c.queryStrings(q.String())
	if err != nil {
		return err
	}
	if len(vals) != 1+NumTrackedVars {
		return fmt.Errorf("keyway: reading the session state: %d values, want %d", len(vals), 1+NumTrackedVars)
	}
	c.State = State{DB: vals[0]}
	copy(c.State.Vars[:], vals[1:])
	// The handshake's collation is every character set's, results included.
	c.State.ResultsCollation = c.State.Vars[varCollationConnection]
	c.DBKnown = true
	return nil
}

// Baseline is the state of a new connection of the pool, with no default database (the zero State before the
// pool's first dial).
func (p *Pool) Baseline() State {
	if b := p.baseline.Load(); b != nil {
		return *b
	}
	return State{}
}

// Needs says what a statement reads of its session's state beyond the default database and the tracked
// variables, which every lease aligns.
type Needs struct {
	// LastInsertID: the statement calls LAST_INSERT_ID(), so the connection must return the session's value.
	LastInsertID bool
	// FreshDiagnostics: the statement reads the previous statement's diagnostics (SHOW WARNINGS, ROW_COUNT()…)
	// on a connection the session did not run its previous statement on: they are cleared first, so it never reads
	// another session's.
	FreshDiagnostics bool
}

// Lease borrows a connection for one statement of a session whose state is want, brings it in line with want and
// needs (Align) and returns it; the caller Releases it when the statement's reply has been relayed. A refusal by the
// server while bringing it in line (the database was dropped) is a *mysqlwire.Error, for the client; the connection
// went back to the pool.
func (p *Pool) Lease(ctx context.Context, want *State, needs Needs) (*Conn, error) {
	c, err := p.get(ctx, &want.DB)
	if err != nil {
		return nil, err
	}
	if err := c.Align(want, needs); err != nil {
		c.Release()
		return nil, err
	}
	return c, nil
}

// Login borrows a connection for a new session whose default database is db, brings it to the state of a new
// connection of the pool (Baseline) with db selected, and returns it with that state, the session's first. A
// refusal by the server (no such database) is a *mysqlwire.Error; the connection went back to the pool.
func (p *Pool) Login(ctx context.Context, db string) (*Conn, State, error) {
	c, err := p.get(ctx, &db)
	if err != nil {
		return nil, State{}, err
	}
	st := p.Baseline() // known now: set at the pool's first dial, before any connection was handed out
	st.DB = db
	if err := c.Align(&st, Needs{}); err != nil {
		c.Release()
		return nil, State{}, err
	}
	return c, st, nil
}

// Align brings c's state in line with want: the default database (COM_INIT_DB), the tracked variables (one SET),
// and what needs asks. It counts the commands it sent in the pool's fix-ups.
func (c *Conn) Align(want *State, needs Needs) error {
	if c.State.DB != want.DB || !c.DBKnown {
		if err := c.alignDB(want.DB); err != nil {
			return err
		}
	}
	set := c.setFor(want, needs.LastInsertID)
	if set == "" && needs.FreshDiagnostics {
		set = "DO 0"
	}
	if set == "" {
		return nil
	}
	if c.pool != nil {
		c.pool.fixups.Add(1)
	}
	if err := c.exec(set); err != nil {
		return err
	}
	// What want says, now true of c (the OK reported it too).
	c.State.Vars, c.State.ResultsCollation = want.Vars, want.ResultsCollation
	if needs.LastInsertID {
		c.State.LastInsertID = want.LastInsertID
	}
	c.rereadCollation, c.namesCollation = false, false
	return nil
}

// alignDB selects db (COM_INIT_DB). There is no command to leave none selected: Lease gives a session without a
// database only a connection without one (Pool.get), so here that is an internal error (errNoDatabase).
func (c *Conn) alignDB(db string) error {
	if db == "" {
		c.broken = true
		return errNoDatabase
	}
	if c.pool != nil {
		c.pool.fixups.Add(1)
	}
	return c.InitDB(db)
}

// errNoDatabase: the connection has a default database and the session has none (see alignDB).
var errNoDatabase = errors.New("keyway: the connection has a default database, the session none")

// setFor is the SET statement that brings c's variables to want's ("" when they agree).
func (c *Conn) setFor(want *State, lastInsertID bool) string {
	var b strings.Builder
	have := &c.State
	first := 0
	if charsetsDiffer(have, want) {
		wv := &want.Vars
		if wv[0] == wv[1] && wv[1] == wv[varCharsetConnection] && want.ResultsCollation != "" &&
			want.ResultsCollation == wv[varCollationConnection] {
			// The three alike, with one collation: what SET NAMES cs COLLATE co (or a handshake) makes.
			b.WriteString("SET NAMES '")
			b.WriteString(quoteEscaper.Replace(wv[0]))
			b.WriteString("' COLLATE '")
			b.WriteString(quoteEscaper.Replace(wv[varCollationConnection]))
			b.WriteString("'")
			first = varCollationConnection + 1
		}
	}
	for i := first; i < len(trackedVars); i++ {
		w := want.Vars[i]
		same := w == have.Vars[i]
		if i == varCharsetResults && first == 0 && want.ResultsCollation != have.ResultsCollation {
			same = false // set again: character_set_results takes its character set's default collation
		}
		if same {
			continue
		}
		if i == varCollationConnection && w == "" {
			// want has the default collation of its character set. A SET of the character set resets it: that is
			// already in the statement when the character sets differ, else it is set again for that.
			if want.Vars[varCharsetConnection] == have.Vars[varCharsetConnection] {
				appendSet(&b, trackedVars[varCharsetConnection], want.Vars[varCharsetConnection])
			}
			continue
		}
		appendSet(&b, trackedVars[i], w)
	}
	if lastInsertID && want.LastInsertID != have.LastInsertID {
		if b.Len() == 0 {
			b.WriteString("SET SESSION ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString("last_insert_id = ")
		b.WriteString(strconv.FormatUint(want.LastInsertID, 10))
	}
	return b.String()
}

// charsetsDiffer reports whether the character sets and collations of a and b differ.
func charsetsDiffer(a, b *State) bool {
	return a.ResultsCollation != b.ResultsCollation || [4]string(a.Vars[:4]) != [4]string(b.Vars[:4])
}

// appendSet appends "name = value" to a SET statement being built in b.
func appendSet(b *strings.Builder, v trackedVar, value string) {
	if b.Len() == 0 {
		b.WriteString("SET SESSION ")
	} else {
		b.WriteString(", ")
	}
	b.WriteString(v.name)
	b.WriteString(" = ")
	switch {
	case v.kind == varStringNull && value == "":
		b.WriteString("NULL")
	case v.kind == varNumber && isNumber(value), v.kind == varBool && (value == "ON" || value == "OFF"):
		b.WriteString(value)
	default:
		b.WriteByte('\'')
		b.WriteString(quoteEscaper.Replace(value))
		b.WriteByte('\'')
	}
}

// quoteEscaper escapes a value for a single-quoted SQL string.
var quoteEscaper = strings.NewReplacer(`\`, `\\`, `'`, `\'`)

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && r != '.' && r != '-' {
			return false
		}
	}
	return true
}

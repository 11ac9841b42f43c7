package backend

// This file is the statements prepared on a backend connection. The SQL door gives its clients statement ids of its
// own; a client's statement runs on whichever connection its session borrows, prepared there the first time
// (Conn.Prepare) and kept in the connection's cache for every session that runs the same text in the same state
// (StmtKey). The cache is bounded (MaxStmtsPerConn, less when the group's connection budget times it would pass half
// the server's max_prepared_stmt_count: Group.stmtsPerConn): past it the least recently used statement is closed on
// the server (COM_STMT_CLOSE), so keyway's connections together never take the server's last statements.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// MaxStmtsPerConn bounds the statements prepared on one connection (lowered per group: see the file comment). With
// MariaDB's defaults (a budget of 136 connections, max_prepared_stmt_count 16,382) it is the bound: 136 × 60 = 8,160.
const MaxStmtsPerConn = 60

const (
	comStmtPrepare = 0x16
	comStmtClose   = 0x19
)

// StmtKey is what a prepared statement depends on besides its text: the default database names its tables,
// sql_mode and the character sets decide how the text is read, and the results' how its columns are described.
type StmtKey struct {
	Text, DB, SQLMode, Charset, Collation string
	Results                               string // character_set_results and its collation: the definitions' character set
}

// Stmt is a statement prepared on one backend connection.
type Stmt struct {
	ID              uint32 // the server's statement id on the connection
	Params, Columns int
	// Reply is the server's whole reply to the prepare, as payloads each behind a 3-byte little-endian length:
	// the PREPARE_OK packet, the parameter definitions and the column definitions (with their EOFs). Defs are the
	// column definitions the server last sent for the statement, in the same form without the EOF: what a client
	// with MariaDB's metadata cache holds when it got them (SetDefs records those an execute sent).
	Reply, Defs []byte
	// Types are the parameter types the server has for the statement (the last execute that bound them), nil
	// before any.
	Types []byte
	used  uint64 // the connection's use counter at its last use, for eviction
}

// stmtKey is the key of text in c's current state.
func (c *Conn) stmtKey(text string) StmtKey {
	return StmtKey{Text: text, DB: c.State.DB, SQLMode: c.State.Vars[varSQLMode],
		Charset: c.State.Vars[0], Collation: c.State.Vars[varCollationConnection],
		Results: c.State.Vars[varCharsetResults] + "/" + c.State.ResultsCollation}
}

// Stmt returns the statement prepared on c for text in c's current state, or nil.
func (c *Conn) Stmt(text string) *Stmt {
	st := c.stmts[c.stmtKey(text)]
	if st != nil {
		c.stmtUses++
		st.used = c.stmtUses
	}
	return st
}

// Prepare prepares text on c (COM_STMT_PREPARE), keeps it in c's statement cache and returns it. A refusal by the
// server is a *mysqlwire.Error (c stays usable); an I/O or protocol error marks c broken. The reply is read whole:
// prepare replies are small.
func (c *Conn) Prepare(text string) (*Stmt, error) {
	if err := c.WriteCommand(comStmtPrepare, []byte(text)); err != nil {
		c.broken = true
		return nil, err
	}
	p, err := c.ReadPacket()
	if err != nil {
		c.broken = true
		return nil, err
	}
	if len(p) > 0 && p[0] == mysqlwire.HeaderERR {
		return nil, mysqlwire.ParseError(p)
	}
	if len(p) < 9 || p[0] != mysqlwire.HeaderOK {
		c.broken = true
		return nil, fmt.Errorf("%w: reply 0x%x to COM_STMT_PREPARE", mysqlwire.ErrMalformed, p)
	}
	st := &Stmt{ID: binary.LittleEndian.Uint32(p[1:]), Columns: int(binary.LittleEndian.Uint16(p[5:])),
		Params: int(binary.LittleEndian.Uint16(p[7:]))}
	st.Reply = appendPayload(st.Reply, p)
	eof := 0
	if c.Capabilities&mysqlwire.ClientDeprecateEOF == 0 {
		eof = 1
	}
	for part, k := range [2]int{st.Params, st.Columns} {
		if k == 0 {
			continue
		}
		start := len(st.Reply)
		for i := range k + eof {
			if part == 1 && i == k {
				st.Defs = st.Reply[start:len(st.Reply):len(st.Reply)] // the definitions, not the EOF after them
			}
			q, err := c.ReadPacket()
			if err != nil {
				c.broken = true
				return nil, err
			}
			st.Reply = appendPayload(st.Reply, q)
		}
		if part == 1 && eof == 0 {
			st.Defs = st.Reply[start:]
		}
	}
	c.addStmt(c.stmtKey(text), st)
	return st, nil
}

// appendPayload appends p behind its 3-byte length.
func appendPayload(b, p []byte) []byte {
	return append(append(b, byte(len(p)), byte(len(p)>>8), byte(len(p)>>16)), p...)
}

// Payloads calls fn for each payload of b (as Stmt.Reply holds them) until fn returns false.
func Payloads(b []byte, fn func([]byte) bool) error {
	for len(b) > 0 {
		if len(b) < 3 {
			return errors.New("keyway: truncated payload list")
		}
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if len(b) < 3+n {
			return errors.New("keyway: truncated payload list")
		}
		if !fn(b[3 : 3+n]) {
			return nil
		}
		b = b[3+n:]
	}
	return nil
}

// addStmt keeps st under k, closing on the server the least recently used statement when the cache is full.
func (c *Conn) addStmt(k StmtKey, st *Stmt) {
	if c.stmts == nil {
		c.stmts = make(map[StmtKey]*Stmt)
	}
	if old := c.stmts[k]; old != nil {
		c.closeStmt(old.ID)
	}
	limit := MaxStmtsPerConn
	if c.pool != nil {
		limit = int(c.pool.g.stmtsPerConn.Load())
	}
	if len(c.stmts) >= limit {
		var lk StmtKey
		var lru *Stmt
		for k, s := range c.stmts {
			if lru == nil || s.used < lru.used {
				lk, lru = k, s
			}
		}
		delete(c.stmts, lk)
		c.closeStmt(lru.ID)
	}
	c.stmtUses++
	st.used = c.stmtUses
	c.stmts[k] = st
}

// closeStmt closes statement id on the server (COM_STMT_CLOSE has no reply). A failure marks c broken.
func (c *Conn) closeStmt(id uint32) {
	if err := c.WriteCommand(comStmtClose, binary.LittleEndian.AppendUint32(nil, id)); err != nil {
		c.broken = true
	}
}

// SetDefs records column definitions an execute of st sent (the statement's metadata changed: DDL).
func (st *Stmt) SetDefs(defs []byte) { st.Defs = defs }

// ForgetStmts drops c's statement cache without closing them on the server: after a reset, which closed them.
func (c *Conn) ForgetStmts() { clear(c.stmts) }

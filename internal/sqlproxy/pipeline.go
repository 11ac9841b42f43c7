package sqlproxy

// This file holds the steps a statement goes through in a session, made explicit so the cache, replicas and
// shards each have one place to land:
//
//  1. plan     — PlanCache.Plan: class, tables, cacheability and the key a point statement names, once per digest.
//  2. route    — session.route: where the statement goes, from the plan and the session's pin state: the result
//                cache (cache.go) or the session's own backend connection; next a replica or a shard.
//  3. exchange — session.exchange(command, plan, relay, sink): settle the tables the plan names, send, relay the
//                reply, invalidate what the plan wrote before the client sees the reply.
//  4. sink     — where the reply goes: the client, or nowhere (a reply the client must not see); a cache fill
//                also keeps a bounded copy (mysqlwire.Conn.StartCapture).
//
// Pin state: a session whose backend connection holds state the statement may depend on (an open transaction;
// session variables, a default database changed inside a multi-statement, temporary tables, table locks, user
// variables, server-side PREPAREd statements) is pinned to that connection, and nothing it runs is answered
// from elsewhere. The plan's flags say which statements pin; the pin state lives on the session.

import (
	"encoding/binary"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/validity"
)

// pinState is the session state, beyond the backend's own status flags, that ties a session to its backend
// connection.
type pinState struct {
	// session: the connection carries session state (SET, USE inside a multi-statement, temporary tables, locks,
	// user variables, PREPARE); kept until the connection is reset (COM_RESET_CONNECTION, COM_CHANGE_USER).
	session bool
}

// note updates the pin state after plan ran (failed: the server refused it).
func (p *pinState) note(plan *Plan, failed bool) {
	if plan != nil && !failed && plan.SessionChange {
		p.session = true
	}
}

// pinned reports whether the session's statements must stay on its backend connection, and why. A transaction is
// read from the backend's own status flags after the last reply (in a transaction, or autocommit off so the next
// statement opens one), which no statement text can hide.
func (ss *session) pinned() (bool, string) {
	switch st := ss.be.Status; {
	case st&mysqlwire.StatusInTrans != 0:
		return true, "inside a transaction"
	case st&mysqlwire.StatusAutocommit == 0:
		return true, "autocommit is off"
	case ss.pin.session:
		return true, "the session changed its state (SET, temporary tables, locks, user variables)"
	}
	return false, ""
}

// target is where route sends a statement.
type target uint8

const (
	// toSession: the session's own backend connection.
	toSession target = iota
	// toCache: the result cache answers, or the session's connection does and its reply fills the cache
	// (cache.go).
	toCache
)

// route picks the statement's target: the result cache for a cacheable read of an unpinned session while the
// binlog followers vouch for freshness, else the session's backend connection. Replicas come here next. Point
// selects (one equality on one column of one table) are cached without configuration; h, the statement's own
// hint, can ask for any cacheable read to be cached, or for none.
func (ss *session) route(plan *Plan, h hint) target {
	c := ss.s.opts.Cache
	if c == nil || plan == nil || !plan.Cacheable || h.nocache || (plan.Key == nil && !h.cache) {
		return toSession
	}
	if pinned, _ := ss.pinned(); pinned {
		c.Bypassed(qcache.Pinned)
		return toSession
	}
	if !c.Usable(ss.gate()) {
		c.Bypassed(qcache.NotFresh)
		return toSession
	}
	return toCache
}

// hint is what a statement's "/*+ keyway … */" comment asks of the cache: "nocache", or "cache" with an optional
// "ttl=N" (seconds) after which the entry is dropped even if nothing invalidated it.
type hint struct {
	nocache, cache bool
	ttl            time.Duration
}

// CacheRule is a [[cache.rules]] entry: reads it matches are cached as if they carried /*+ keyway cache */, with
// TTL as their ttl. Exactly one of Digest, Table and Regex is set.
type CacheRule struct {
	Digest string
	Table  validity.TableID // Schema "" matches the name in every schema
	Regex  *regexp.Regexp   // matched against the normalized statement
	TTL    time.Duration
}

// hintFor is the cache hint of a statement: its own "/*+ keyway … */" comment, else the first rule that matches
// it. Digest and regex rules are decided once per fingerprint; table rules per statement, since the default database
// decides what an unqualified name means.
func (ss *session) hintFor(sql string, plan *Plan) hint {
	h := hintOf(sql)
	rules := *ss.s.rules.Load()
	if h.cache || h.nocache || len(rules) == 0 || plan == nil || !plan.Cacheable {
		return h
	}
	for i := range rules {
		r := &rules[i]
		var match bool
		switch {
		case r.Digest != "":
			match = r.Digest == plan.Digest
		case r.Regex != nil:
			v, ok := ss.s.regexMatches.Load(regexKey{r.Regex, plan.Fingerprint})
			if !ok {
				v = r.Regex.MatchString(plan.Normalized)
				if ss.s.regexCount.Add(1) > maxRegexMemo { // forget, rather than grow with every digest ever seen
					ss.s.regexMatches.Clear()
					ss.s.regexCount.Store(0)
				}
				ss.s.regexMatches.Store(regexKey{r.Regex, plan.Fingerprint}, v)
			}
			match = v.(bool)
		default:
			for _, id := range plan.TableIDs(ss.db) {
				match = match || id.Name == r.Table.Name && (r.Table.Schema == "" || r.Table.Schema == id.Schema)
			}
		}
		if match {
			return hint{cache: true, ttl: r.TTL}
		}
	}
	return h
}

// maxRegexMemo bounds the memoized regex verdicts.
const maxRegexMemo = 1 << 16

// regexKey memoizes a regex rule's verdict on a statement's normalized text, found by its fingerprint.
type regexKey struct {
	rule        *regexp.Regexp // the rule's own, so a verdict never outlives its rule (SetCacheRules)
	fingerprint uint64
}

// hintOf reads the keyway hint of sql, if any. The digest erases comments, so this is read per statement text;
// it costs one substring search for statements without "/*+".
func hintOf(sql string) hint {
	var h hint
	i := strings.Index(sql, "/*+")
	if i < 0 {
		return h
	}
	body, _, ok := strings.Cut(sql[i+3:], "*/")
	if !ok {
		return h
	}
	f := strings.Fields(strings.ToLower(body))
	if len(f) < 2 || f[0] != "keyway" {
		return h
	}
	switch f[1] {
	case "nocache":
		h.nocache = true
	case "cache":
		h.cache = true
		for _, a := range f[2:] {
			if v, ok := strings.CutPrefix(a, "ttl="); ok {
				if n, err := strconv.Atoi(v); err == nil && n > 0 {
					h.ttl = time.Duration(n) * time.Second
				}
			}
		}
	}
	return h
}

// sink is where a relayed reply goes.
type sink uint8

const (
	toClient sink = iota // the client
	discard              // nowhere: the client must not see it (a refused LOCAL INFILE's leftovers)
)

// conn is the client connection a sink writes to, nil for discard.
func (s sink) conn(ss *session) *mysqlwire.Conn {
	if s == toClient {
		return ss.c
	}
	return nil
}

// prepared is a client's prepared statement: the backend connection it was prepared on and its id there. Client
// ids are the backend ids of the statement's connection (so replies pass unchanged); every use goes through this
// map, so a statement whose connection is no longer the session's (a reconnect, later another member) is refused
// with ER_UNKNOWN_STMT_HANDLER instead of naming whatever that id means on the new connection.
type prepared struct {
	be        *backend.Conn
	backendID uint32
	plan      *Plan
	query     string // the statement text, as prepared (a cache key holds it)
	params    int    // its parameter count
	// types are the parameter types the client bound last (an execute may omit them); longData is set while
	// parameters were sent with COM_STMT_SEND_LONG_DATA since the last execute. Both decide cacheability.
	// backendTyped: the backend has been sent types for this statement (see forBackend).
	types        []byte
	longData     bool
	backendTyped bool
}

// stmt finds the prepared statement a COM_STMT_* packet names and rewrites p to carry its backend id. ok is false
// when the id is known but its connection is gone (the client has been answered for commands with a reply); an
// unknown id is passed through unchanged for the server to refuse as it would.
func (ss *session) stmt(p []byte, answer string) (st *prepared, ok bool, err error) {
	if len(p) < 5 {
		return nil, true, nil
	}
	id := binary.LittleEndian.Uint32(p[1:])
	st = ss.stmts[id]
	if st == nil {
		return nil, true, nil
	}
	if st.be != ss.be {
		delete(ss.stmts, id)
		if answer == "" {
			return nil, false, nil
		}
		return nil, false, ss.reply(mysqlwire.NewError(mysqlwire.ERUnknownStmtHandler, "HY000",
			"Unknown prepared statement handler (%d) given to %s: keyway's backend connection changed since it was prepared; prepare it again", id, answer))
	}
	binary.LittleEndian.PutUint32(p[1:], st.backendID)
	return st, true, nil
}

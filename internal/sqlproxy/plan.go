package sqlproxy

// This file is the SQL door's plan cache: statement text → fingerprint → Plan.
//
// The job: pay for classification once per normalized statement, not once per query. Every query gets one
// allocation-free pass that hashes its tokens with literals erased (fingerprint.go); the 64-bit fingerprint is
// looked up in a bounded, sharded map; only a fingerprint never seen before (or evicted) pays for TiDB's
// parser.NormalizeDigest (the digest and normalized text shown to people and matched by digest rules) and is parsed
// with the real grammar to find its class and tables.
//
// Invariants:
//   - Plan never returns nil and never panics, whatever the input (a parser panic is recovered and reported as a
//     parse error).
//   - A fingerprint is parsed at most once while it stays cached: concurrent first lookups of one fingerprint wait
//     on one parse (sync.Once per entry) instead of each parsing.
//   - The returned *Plan is shared by every caller that hits the same fingerprint and must be treated as read-only
//     (Tables included). The one exception to "one plan per fingerprint" is a statement whose meaning depends on
//     a literal the fingerprint erased — SET autocommit = 0 versus = 1 — which gets a fresh, uncached plan each
//     time.
//   - The cache holds at most max(capacity, shards) entries; a full shard evicts an arbitrary entry (Go's map
//     iteration order), which is cheap and good enough: hot digests come straight back.

import (
	"hash/maphash"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/keywaydb/keyway/internal/sqlnames"
	// The parser needs a driver for literal values; test_driver is the self-contained one the parser ships for
	// users outside TiDB (go-mysql and others use it the same way).
	_ "github.com/pingcap/tidb/pkg/parser/test_driver"

	"github.com/keywaydb/keyway/internal/validity"
)

// Class is the coarse kind of a statement, the first thing routing and caching ask about it.
type Class uint8

const (
	// ClassOther is anything not below: KILL, FLUSH, DO, ANALYZE TABLE, statements nobody could classify.
	ClassOther Class = iota
	// ClassRead reads data and changes nothing: SELECT (including FOR UPDATE / LOCK IN SHARE MODE), set
	// operations, WITH … SELECT, SHOW, DESCRIBE, EXPLAIN.
	ClassRead
	// ClassWrite changes rows or writes files: INSERT, REPLACE, UPDATE, DELETE, LOAD DATA, SELECT … INTO, CALL
	// (a procedure may write, so it is treated as one).
	ClassWrite
	// ClassDDL changes schema objects or accounts: CREATE/ALTER/DROP/TRUNCATE/RENAME, GRANT/REVOKE, CREATE USER….
	ClassDDL
	// ClassTransaction is transaction control: BEGIN, START TRANSACTION, COMMIT, ROLLBACK, SAVEPOINT, RELEASE
	// SAVEPOINT, XA.
	ClassTransaction
	// ClassSession changes the session's state: SET, USE, LOCK/UNLOCK TABLES, FLUSH TABLES WITH READ LOCK, HANDLER,
	// PREPARE/EXECUTE/DEALLOCATE, user variable assignment (also SELECT @v := … and SELECT … INTO @v), and
	// CREATE/DROP TEMPORARY TABLE — a temporary table lives and dies with the session, so it pins the session
	// rather than changing the shared schema. Which statements pin, of any class, is Plan.Pins (pipeline.go's
	// pinTable).
	ClassSession
)

// String returns "other", "read", "write", "ddl", "transaction" or "session".
func (c Class) String() string {
	switch c {
	case ClassRead:
		return "read"
	case ClassWrite:
		return "write"
	case ClassDDL:
		return "ddl"
	case ClassTransaction:
		return "transaction"
	case ClassSession:
		return "session"
	}
	return "other"
}

// strength orders classes for a multi-statement query, whose class is the strongest of its parts:
// write > ddl > transaction > session > read > other. Write ranks first because it is what caching must never miss
// (invalidation); DDL next because it changes what tables mean.
func (c Class) strength() int {
	switch c {
	case ClassWrite:
		return 5
	case ClassDDL:
		return 4
	case ClassTransaction:
		return 3
	case ClassSession:
		return 2
	case ClassRead:
		return 1
	}
	return 0
}

// Plan is what keyway knows about one normalized statement. Plans are shared between callers: read-only.
type Plan struct {
	// Fingerprint keys the plan cache and the digest statistics (fingerprint.go); it is seeded per process, so it
	// is never shown: Digest is.
	Fingerprint uint64
	Digest      string // hex digest of the normalized statement (SHA-256, as TiDB's parser.NormalizeDigest)
	Normalized  string // literals replaced by ?, lower-cased keywords, optimizer hints and comments dropped
	Class       Class
	// Tables it reads or writes: "schema.table" when qualified, else "table"; lower-case; deduplicated, in order
	// of appearance. CTE names are not tables and are left out.
	Tables []string
	// InTransaction: after this statement the session is inside an explicit transaction (BEGIN, START
	// TRANSACTION, XA START, SET autocommit=0, or COMMIT/ROLLBACK AND CHAIN). For a multi-statement query both
	// flags describe the state after its last transaction-control statement, so at most one of them is set.
	InTransaction bool
	// EndsTransaction: this statement ends the explicit transaction (COMMIT, ROLLBACK but not ROLLBACK TO
	// SAVEPOINT, XA COMMIT/ROLLBACK, SET autocommit=1). Implicit commits (DDL, LOCK TABLES) are not flagged.
	EndsTransaction bool
	// SessionChange: at least one statement of the query is ClassSession (SET, USE, LOCK TABLES, PREPARE,
	// temporary tables…). It differs from Class == ClassSession for multi-statements such as "USE db; INSERT …",
	// whose Class is the stronger write.
	SessionChange bool
	// Pins are the reasons this statement pins its session once it succeeded; Unpins those it ends (UNLOCK
	// TABLES, RELEASE_ALL_LOCKS()). A statement that does both keeps the pin. See pinTable (pipeline.go).
	Pins, Unpins PinSet
	// ReadsLastInsertID: the statement calls LAST_INSERT_ID(), which must return the session's value on whatever
	// connection runs it. ReadsDiagnostics: it may read the previous statement's diagnostics (SHOW WARNINGS/ERRORS,
	// @@warning_count, @@error_count, ROW_COUNT(), FOUND_ROWS()). KeepNext: the session's next statement runs on
	// this one's connection, where those diagnostics are: writes (ROW_COUNT()), SELECT SQL_CALC_FOUND_ROWS
	// (FOUND_ROWS()) and SET STATEMENT … FOR (the server reports its variable's restore with the next statement).
	// Found from the normalized text's words, so a column named row_count costs a needless fix-up, never a wrong
	// answer.
	ReadsLastInsertID, ReadsDiagnostics, KeepNext bool
	// Kill is set for a KILL statement: the id it names is one of keyway's session ids, which the session maps to
	// that session's backend thread (kill.go) instead of relaying it.
	Kill KillKind
	// ParseError is non-empty when the parser could not parse the statement (MariaDB-only syntax, for example).
	// Class is then guessed from the first keyword where that is unambiguous (INSERT… is a write, SELECT… a
	// read, and so on) and is ClassOther otherwise; Tables is then empty.
	ParseError string

	// Cacheable: the statement's answer depends only on table contents keyway can invalidate (planshape.go);
	// NotCacheable says why not.
	Cacheable    bool
	NotCacheable string
	// Key is where the key of a single-table point SELECT, UPDATE or DELETE comes from; nil for others.
	Key *KeyRef

	// multi: the query has several statements, so a failure may come after some of them ran.
	multi bool
	// literalDependent marks plans whose flags depend on a literal the digest replaced by "?" (SET autocommit=?).
	literalDependent bool
	// keyToken, when > 0, is 1 + which literal of the fingerprint's (literalSpans) is the key of a "column =
	// literal" point statement, checked against the parser on the statement the plan was built from: KeyValues
	// reads it from a statement's text without parsing it again. 0: parse again.
	keyToken int
	// route is where the statement's shard key values come from, for the shard router (routeref.go); nil for a
	// statement without tables.
	route *routeRef
	// resolved is Tables resolved in the last default database asked for (see TableIDs).
	resolved atomic.Pointer[resolvedTables]
}

type resolvedTables struct {
	db  string
	ids []validity.TableID
}

// TableIDs are the plan's tables as validity identifies them, unqualified names taken in default database db. The
// result is kept on the plan for db, so the naming rule runs once per (digest, default database), not per
// statement; the slice is shared: do not modify it.
func (p *Plan) TableIDs(db string) []validity.TableID {
	if r := p.resolved.Load(); r != nil && r.db == db {
		return r.ids
	}
	r := &resolvedTables{db: db, ids: validity.Resolve(db, p.Tables)}
	p.resolved.Store(r)
	return r.ids
}

// KillKind tells what a KILL statement asks for.
type KillKind uint8

const (
	KillNone       KillKind = iota // not a KILL statement
	KillQuery                      // KILL QUERY id: interrupt the session's statement
	KillConnection                 // KILL [CONNECTION] id: end the session
	// KillRefused is a KILL keyway cannot map to one session of its own: KILL USER, KILL HARD/SOFT, KILL QUERY ID,
	// a computed id, KILL inside a multi-statement. Relayed, it would name backend threads by MariaDB's ids.
	KillRefused
)

const planShards = 16

// PlanCache maps statement text to a Plan through its digest. Safe for concurrent use.
type PlanCache struct {
	seed     maphash.Seed
	perShard int
	shards   [planShards]planShard
	parsers  sync.Pool    // *parser.Parser; a Parser is not safe for concurrent use
	parses   atomic.Int64 // statements handed to the real parser (tests assert parse-once with it)
}

type planShard struct {
	mu sync.RWMutex
	m  map[uint64]*planEntry
	_  [32]byte // keep neighbouring shards' locks off one cache line
}

// planEntry is created under the shard lock and filled once, outside it, by the first caller.
type planEntry struct {
	once sync.Once
	plan *Plan
}

// NewPlanCache returns a cache that holds about capacity digests (at least one per shard).
func NewPlanCache(capacity int) *PlanCache {
	per := capacity / planShards
	if per < 1 {
		per = 1
	}
	pc := &PlanCache{seed: maphash.MakeSeed(), perShard: per}
	pc.parsers.New = func() any { return parser.New() }
	for i := range pc.shards {
		pc.shards[i].m = make(map[uint64]*planEntry)
	}
	return pc
}

// Plan returns the plan of sql (one statement, or several separated by ';'). Never nil; safe for concurrent use.
// The hit path is one fingerprint pass plus one map lookup under a read lock, without allocating. sql may be a
// view of a buffer that the caller reuses once Plan has returned: plans are built from a copy.
func (pc *PlanCache) Plan(sql string) *Plan {
	fp := fingerprint(pc.seed, sql)
	sh := &pc.shards[fp%planShards]

	sh.mu.RLock()
	e := sh.m[fp]
	sh.mu.RUnlock()
	if e == nil {
		sh.mu.Lock()
		if e = sh.m[fp]; e == nil {
			if len(sh.m) >= pc.perShard {
				for k := range sh.m { // arbitrary victim: map iteration order is unspecified
					delete(sh.m, k)
					break
				}
			}
			e = &planEntry{}
			sh.m[fp] = e
		}
		sh.mu.Unlock()
	}
	built := false
	e.once.Do(func() {
		sql := strings.Clone(sql)
		normalized, d := parser.NormalizeDigest(sql)
		e.plan, built = pc.build(sql, normalized, d.String(), fp), true
	})
	if e.plan.literalDependent && !built {
		// Same fingerprint, so the same literal-free text and digest: only the parse is redone.
		return pc.build(strings.Clone(sql), e.plan.Normalized, e.plan.Digest, fp)
	}
	return e.plan
}

// Len returns the number of cached fingerprints.
func (pc *PlanCache) Len() int {
	n := 0
	for i := range pc.shards {
		sh := &pc.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// build parses sql and derives its plan. It never panics: the parser is third-party code fed with client input,
// so a panic in it (or in the walk over its AST) becomes a parse error.
func (pc *PlanCache) build(sql, normalized, digest string, fp uint64) (p *Plan) {
	p = &Plan{Fingerprint: fp, Digest: digest, Normalized: normalized}
	pc.parses.Add(1)
	ps := pc.parsers.Get().(*parser.Parser)
	defer func() {
		if r := recover(); r != nil {
			// Drop ps: its state is unknown after a panic.
			p = &Plan{Fingerprint: fp, Digest: digest, Normalized: normalized, ParseError: "parser panicked; statement not classified"}
			guessFromKeywords(p)
		}
	}()
	stmts, _, err := ps.Parse(sql, "", "")
	if err != nil || len(stmts) == 0 {
		pc.parsers.Put(ps)
		if err != nil {
			p.ParseError = truncate(err.Error(), maxParseError)
		} else {
			p.ParseError = "empty statement"
		}
		guessFromKeywords(p)
		noteDiagnostics(p)
		return p
	}
	var tc sqlnames.Collector
	p.multi = len(stmts) > 1
	for _, st := range stmts {
		var pf pinFinder
		st.Accept(&pf)
		p.Pins |= pf.pins
		p.Unpins |= pf.unpins
		c := classify(st, p)
		if c == ClassSession {
			p.SessionChange = true
		}
		if c.strength() > p.Class.strength() {
			p.Class = c
		}
		tc.Collect(st)
	}
	if p.Kill != KillNone && len(stmts) > 1 {
		p.Kill = KillRefused
	}
	noteDiagnostics(p)
	p.Tables = tc.Tables()
	shape(stmts, p)
	p.keyToken = keyToken(sql, stmts) + 1
	if len(p.Tables) > 0 || p.Class == ClassDDL {
		p.route = routeOf(sql, stmts)
	}
	// Only now: the parser recycles its AST nodes on the next Parse, so the walk above must finish first.
	pc.parsers.Put(ps)
	return p
}

// maxParseError bounds ParseError: the parser quotes the rest of the statement after the error, which can be large,
// and plans are kept for capacity digests.
const maxParseError = 256

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) { // do not cut a UTF-8 sequence
		n--
	}
	return s[:n] + "…"
}

// classify returns the class of one statement and updates p's transaction flags.
func classify(st ast.StmtNode, p *Plan) Class {
	begin := func() { p.InTransaction, p.EndsTransaction = true, false }
	end := func() { p.InTransaction, p.EndsTransaction = false, true }
	switch s := st.(type) {
	case *ast.SelectStmt:
		if s.SelectIntoOpt != nil && s.SelectIntoOpt.Tp == ast.SelectIntoVars {
			p.Pins |= pinSet(PinUserVariable)
			return ClassSession
		}
		if s.SelectIntoOpt != nil {
			return ClassWrite
		}
		if assignsUserVariable(s) {
			return ClassSession // pinFinder pinned it
		}
		return ClassRead
	case *ast.SetOprStmt:
		if assignsUserVariable(s) {
			return ClassSession
		}
		return ClassRead
	case *ast.ShowStmt, *ast.ExplainForStmt, *ast.TraceStmt, *ast.HelpStmt, *ast.PlanReplayerStmt:
		return ClassRead
	case *ast.ExplainStmt:
		// EXPLAIN ANALYZE runs the statement; a plain EXPLAIN (or DESCRIBE t) only reads.
		if s.Analyze && s.Stmt != nil {
			var q Plan
			if c := classify(s.Stmt, &q); c != ClassRead {
				return c
			}
		}
		return ClassRead
	case *ast.InsertStmt, *ast.UpdateStmt, *ast.DeleteStmt, *ast.LoadDataStmt, *ast.ImportIntoStmt,
		*ast.CallStmt, *ast.NonTransactionalDMLStmt:
		return ClassWrite
	case *ast.CreateTableStmt:
		if s.TemporaryKeyword != ast.TemporaryNone {
			p.Pins |= pinSet(PinTemporaryTable)
			return ClassSession
		}
		return ClassDDL
	case *ast.DropTableStmt:
		if s.TemporaryKeyword != ast.TemporaryNone {
			p.Pins |= pinSet(PinTemporaryTable)
			return ClassSession
		}
		return ClassDDL
	case *ast.BeginStmt:
		begin()
		return ClassTransaction
	case *ast.CommitStmt:
		end()
		if s.CompletionType == ast.CompletionTypeChain {
			begin()
		}
		return ClassTransaction
	case *ast.RollbackStmt:
		if s.SavepointName == "" { // ROLLBACK TO SAVEPOINT keeps the transaction open
			end()
			if s.CompletionType == ast.CompletionTypeChain {
				begin()
			}
		}
		return ClassTransaction
	case *ast.SavepointStmt, *ast.ReleaseSavepointStmt:
		return ClassTransaction
	case *ast.SetStmt:
		for _, v := range s.Variables {
			if v == nil {
				continue
			}
			p.Pins |= setPins(v)
			if !v.IsSystem || v.IsGlobal || !strings.EqualFold(v.Name, "autocommit") {
				continue
			}
			p.literalDependent = true
			switch autocommitValue(v.Value) {
			case 0:
				begin()
			case 1:
				end()
			default: // SET autocommit = @v: unknown, so assume a transaction (never cache inside one)
				begin()
			}
		}
		return ClassSession
	case *ast.UseStmt: // the default database is carried (the server reports it)
		return ClassSession
	case *ast.LockTablesStmt:
		p.Pins |= pinSet(PinTableLock)
		return ClassSession
	case *ast.UnlockTablesStmt:
		p.Unpins |= pinSet(PinTableLock, PinGlobalReadLock)
		return ClassSession
	case *ast.PrepareStmt, *ast.ExecuteStmt, *ast.DeallocateStmt:
		p.Pins |= pinSet(PinPrepare)
		return ClassSession
	case *ast.SetRoleStmt, *ast.SetSessionStatesStmt, *ast.SetResourceGroupStmt:
		p.Pins |= pinSet(PinVariable)
		return ClassSession
	case *ast.FlushStmt:
		if s.Tp == ast.FlushTables && s.ReadLock {
			p.Pins |= pinSet(PinGlobalReadLock)
			return ClassSession
		}
	case *ast.GrantStmt, *ast.GrantRoleStmt, *ast.GrantProxyStmt, *ast.RevokeStmt, *ast.RevokeRoleStmt,
		*ast.CreateUserStmt, *ast.AlterUserStmt, *ast.DropUserStmt, *ast.RenameUserStmt, *ast.SetPwdStmt,
		*ast.SetDefaultRoleStmt:
		return ClassDDL
	case ast.DDLNode: // every other CREATE/ALTER/DROP/TRUNCATE/RENAME the grammar knows
		return ClassDDL
	case *ast.KillStmt:
		switch {
		case s.Expr != nil || s.TiDBExtension:
			p.Kill = KillRefused
		case s.Query:
			p.Kill = KillQuery
		default:
			p.Kill = KillConnection
		}
	}
	return ClassOther
}

// KillID returns the session id a KILL statement names (a plan with Kill set to KillQuery or KillConnection): the
// id is a literal the digest erased, so it is read from this statement's own text. KILL is rare (a client's
// Ctrl-C), so a parse per KILL is cheap.
func (pc *PlanCache) KillID(sql string) (id uint64, ok bool) {
	ps := pc.parsers.Get().(*parser.Parser)
	defer func() {
		if r := recover(); r != nil {
			id, ok = 0, false // drop ps: its state is unknown after a panic
		}
	}()
	stmts, _, err := ps.Parse(sql, "", "")
	if err == nil && len(stmts) == 1 {
		if k, isKill := stmts[0].(*ast.KillStmt); isKill && k.Expr == nil && !k.TiDBExtension {
			id, ok = k.ConnectionID, true
		}
	}
	pc.parsers.Put(ps)
	return id, ok
}

// KeyValues returns the integer values a point statement's key literals have in this statement's own text (the
// plan is shared by statements that differ in them, IN lists of any length too); ok is false unless every one
// is an integer literal. The result cache
// asks on a miss, to key the entry by that row (cache.go), so a parse per fill is cheap beside the backend's
// round trip.
func (pc *PlanCache) KeyValues(sql string, plan *Plan) (vs []any, ok bool) {
	if plan.keyToken > 0 {
		if v, ok := literalKey(sql, plan.keyToken-1); ok {
			return []any{v}, true
		}
	}
	ps := pc.parsers.Get().(*parser.Parser)
	defer func() {
		if r := recover(); r != nil {
			vs, ok = nil, false // drop ps: its state is unknown after a panic
		}
	}()
	stmts, _, err := ps.Parse(sql, "", "")
	if err == nil {
		vs, ok = pointKeyValues(stmts)
	}
	pc.parsers.Put(ps)
	return vs, ok
}

// keyToken finds which of sql's fingerprint literals (literalSpans) is the key literal of stmts, sql's parse, or
// -1: none, an IN list of several literals (statements of one fingerprint may then number their literals
// differently), a literal the parser records no position for, or one the fingerprint reads otherwise than the
// parser.
func keyToken(sql string, stmts []ast.StmtNode) int {
	k, lits := pointKeyExpr(stmts)
	if k == nil || k.In != 0 || len(lits) != 1 {
		return -1
	}
	want, ok := pointKeyValues(stmts)
	at := lits[0].OriginTextPosition()
	spans, collapsed := literalSpans(sql)
	if !ok || at <= 0 || collapsed {
		return -1
	}
	for j, sp := range spans {
		if sp[0] == at {
			if v, ok := decimalKey(sql[sp[0]:sp[1]]); ok && v == want[0] {
				return j
			}
			return -1
		}
	}
	return -1
}

// literalKey reads literal j of sql (literalSpans) as a key (decimalKey); ok is false when it is not one, or when
// an IN list collapsed.
func literalKey(sql string, j int) (any, bool) {
	spans, collapsed := literalSpans(sql)
	if collapsed || j >= len(spans) {
		return nil, false
	}
	return decimalKey(sql[spans[j][0]:spans[j][1]])
}

// decimalKey reads tok as the parser reads an unsigned decimal integer literal: int64, or uint64 past its range.
// ok is false for anything else (signs, points, exponents, hex, quotes, more than uint64 holds).
func decimalKey(tok string) (any, bool) {
	if len(tok) == 0 || len(tok) > 20 {
		return nil, false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return nil, false
		}
	}
	u, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return nil, false
	}
	if u <= math.MaxInt64 {
		return int64(u), true
	}
	return u, true
}

// autocommitValue returns 0 or 1 for a literal autocommit value (0, 1, ON, OFF, TRUE, FALSE, 'on'…), -1 otherwise.
func autocommitValue(e ast.ExprNode) int {
	var b strings.Builder
	switch v := e.(type) {
	case nil:
		return -1
	case *ast.ColumnNameExpr: // SET autocommit = ON parses ON/OFF as a name
		b.WriteString(v.Name.Name.L)
	case ast.ValueExpr:
		switch x := v.GetValue().(type) {
		case int64:
			return boolInt(x != 0)
		case uint64:
			return boolInt(x != 0)
		case string:
			b.WriteString(x)
		default:
			return -1
		}
	default:
		return -1
	}
	switch strings.ToLower(b.String()) {
	case "on", "true", "1":
		return 1
	case "off", "false", "0":
		return 0
	}
	return -1
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// noteDiagnostics sets the plan's ReadsLastInsertID, ReadsDiagnostics and KeepNext from its class and the words
// of its normalized text.
func noteDiagnostics(p *Plan) {
	n := p.Normalized
	p.ReadsLastInsertID = strings.Contains(n, "last_insert_id")
	p.ReadsDiagnostics = strings.Contains(n, "warnings") || strings.Contains(n, "errors") ||
		strings.Contains(n, "warning_count") || strings.Contains(n, "error_count") ||
		strings.Contains(n, "row_count") || strings.Contains(n, "found_rows")
	p.KeepNext = p.Class == ClassWrite || strings.Contains(n, "sql_calc_found_rows") ||
		strings.HasPrefix(n, "set statement ")
}

// setPins is what one SET assignment pins by its text (pinTable): user variables and SET TRANSACTION.
func setPins(v *ast.VariableAssignment) PinSet {
	switch {
	case !v.IsSystem && v.Name != ast.SetNames && v.Name != ast.SetCharset:
		return pinSet(PinUserVariable)
	case strings.EqualFold(v.Name, "tx_isolation_one_shot"), strings.EqualFold(v.Name, "tx_read_only"):
		// SET TRANSACTION …, which the grammar gives these names (also SET SESSION TRANSACTION READ ONLY)
		return pinSet(PinSetTransaction)
	}
	// A session variable, SET NAMES or SET CHARACTER SET: the server reports what it set, and the session is
	// pinned then only if keyway does not carry that variable (backend.State, session.noteState).
	return 0
}

// pinFuncs are the functions whose call pins the session (pinTable), found anywhere in a statement.
var pinFuncs = map[string]PinReason{
	"get_lock":      PinUserLock,
	"connection_id": PinConnectionID,
	"nextval":       PinSequence, // also NEXT VALUE FOR s
	"lastval":       PinSequence, // also PREVIOUS VALUE FOR s, which the grammar rejects (guessOne)
	"setval":        PinSequence,
}

// pinFinder collects the pins and unpins of one statement's expressions: pinFuncs, RELEASE_ALL_LOCKS() and user
// variable assignments (@v := …).
type pinFinder struct{ pins, unpins PinSet }

func (f *pinFinder) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.FuncCallExpr:
		if r, ok := pinFuncs[x.FnName.L]; ok {
			f.pins |= pinSet(r)
		} else if x.FnName.L == "last_insert_id" && len(x.Args) > 0 {
			f.pins |= pinSet(PinLastInsertID) // LAST_INSERT_ID(expr) sets the value, and a SELECT reports it nowhere
		} else if x.FnName.L == "release_all_locks" {
			f.unpins |= pinSet(PinUserLock)
		}
	case *ast.VariableExpr:
		if !x.IsSystem && x.Value != nil {
			f.pins |= pinSet(PinUserVariable)
		}
	}
	return n, false
}

func (f *pinFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// assignsUserVariable reports whether the statement contains @v := expr.
func assignsUserVariable(n ast.Node) bool {
	var f varAssignFinder
	n.Accept(&f)
	return f.found
}

type varAssignFinder struct{ found bool }

func (f *varAssignFinder) Enter(n ast.Node) (ast.Node, bool) {
	if v, ok := n.(*ast.VariableExpr); ok && !v.IsSystem && v.Value != nil {
		f.found = true
	}
	return n, f.found
}

func (f *varAssignFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// guessFromKeywords classifies a statement the parser rejected, from the leading keywords of each ';'-separated
// part of the normalized text (comments and hints are already gone there), combined as for parsed
// multi-statements. It only decides where the first keyword leaves no doubt.
func guessFromKeywords(p *Plan) {
	p.NotCacheable = "not parsed"
	// The normalizer back-quotes words it does not know as keywords (xa becomes `xa`).
	words := strings.Fields(strings.NewReplacer("(", " ", ")", " ", ";", " ; ", "`", "").Replace(p.Normalized))
	for len(words) > 0 {
		n := 0
		for n < len(words) && words[n] != ";" {
			n++
		}
		if n > 0 {
			if c := guessOne(p, words[:n]); c.strength() > p.Class.strength() {
				p.Class = c
			}
		}
		if n < len(words) {
			n++ // the ';'
		}
		words = words[n:]
	}
}

// guessOne classifies one statement's words and updates p's transaction, session and pin flags.
func guessOne(p *Plan, words []string) Class {
	for i, w := range words { // the pinning functions, wherever they are called (pinFinder for parsed statements)
		if r, ok := pinFuncs[w]; ok {
			p.Pins |= pinSet(r)
		} else if w == "release_all_locks" {
			p.Unpins |= pinSet(PinUserLock)
		} else if (w == "previous" || w == "next") && i+2 < len(words) && words[i+1] == "value" && words[i+2] == "for" {
			p.Pins |= pinSet(PinSequence)
		}
	}
	second := ""
	if len(words) > 1 {
		second = words[1]
	}
	switch words[0] {
	case "select", "show", "describe", "desc", "explain", "values", "table", "help":
		if words[0] == "select" && containsWord(words, "into") { // SELECT … INTO OUTFILE/DUMPFILE/@var
			if intoUserVariable(words) {
				p.Pins |= pinSet(PinUserVariable)
				p.SessionChange = true
				return ClassSession
			}
			return ClassWrite
		}
		return ClassRead
	case "with":
		// WITH … SELECT reads; MySQL 8 also allows WITH … UPDATE/DELETE.
		for _, w := range words {
			if w == "update" || w == "delete" || w == "insert" || w == "replace" {
				return ClassWrite
			}
		}
		return ClassRead
	case "insert", "update", "delete", "replace", "load", "call":
		return ClassWrite
	case "create", "drop":
		if second == "temporary" {
			p.SessionChange = true
			return ClassSession
		}
		return ClassDDL
	case "alter", "truncate", "rename", "grant", "revoke":
		return ClassDDL
	case "begin", "start":
		if words[0] == "begin" || second == "transaction" {
			p.InTransaction, p.EndsTransaction = true, false
		}
		return ClassTransaction
	case "commit":
		p.InTransaction, p.EndsTransaction = false, true
		return ClassTransaction
	case "rollback":
		if !containsWord(words, "to") {
			p.InTransaction, p.EndsTransaction = false, true
		}
		return ClassTransaction
	case "savepoint", "release":
		return ClassTransaction
	case "xa":
		switch second {
		case "start", "begin":
			p.InTransaction, p.EndsTransaction = true, false
		case "commit", "rollback":
			p.InTransaction, p.EndsTransaction = false, true
		}
		return ClassTransaction
	case "set", "use", "lock", "unlock", "prepare", "execute", "deallocate", "handler":
		p.SessionChange = true
		switch words[0] {
		case "set": // unparsed: the server reports the system variables it set (SET STATEMENT: see KeepNext)
			if anyUserVariable(words) {
				p.Pins |= pinSet(PinUserVariable)
			}
		case "use":
		case "lock":
			p.Pins |= pinSet(PinTableLock)
		case "unlock":
			p.Unpins |= pinSet(PinTableLock, PinGlobalReadLock)
		case "handler":
			p.Pins |= pinSet(PinHandler)
		default:
			p.Pins |= pinSet(PinPrepare)
		}
		return ClassSession
	case "flush": // FLUSH TABLES t FOR EXPORT, and WITH READ LOCK forms the grammar lacks
		if containsWord(words, "lock") {
			p.Pins |= pinSet(PinGlobalReadLock)
		} else if containsWord(words, "export") {
			p.Pins |= pinSet(PinTableLock)
		}
	case "kill": // a form the grammar lacks (KILL USER, KILL HARD…): never relay it
		p.Kill = KillRefused
	}
	return ClassOther
}

// intoUserVariable reports whether SELECT … INTO names user variables (INTO @v), not a file.
func intoUserVariable(words []string) bool {
	for i, w := range words {
		if w == "into" && i+1 < len(words) && strings.HasPrefix(words[i+1], "@") {
			return true
		}
	}
	return false
}

// anyUserVariable reports whether one of words is a user variable (@v, not @@system).
func anyUserVariable(words []string) bool {
	for _, w := range words {
		if strings.HasPrefix(w, "@") && !strings.HasPrefix(w, "@@") {
			return true
		}
	}
	return false
}

func containsWord(words []string, w string) bool {
	for _, x := range words {
		if x == w {
			return true
		}
	}
	return false
}

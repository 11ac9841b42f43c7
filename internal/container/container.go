// Package container maps memcache operations onto rows of one MySQL/MariaDB
// table: the InnoDB memcached plugin's "containers" model (key column, one or
// more value columns joined by a separator, optional flags, cas and expiry
// columns), run as ordinary SQL through database/sql on a *sql.DB the caller
// owns (OpenDB builds one per backend group). Beside the operations it holds
// what else is about one table: the write path shared with write-behind
// (WriteRows), the row a binlog image stands for (FromImage), the cache
// policies (Policy) and the import of the plugin's innodb_memcache schema.
//
// Invariants:
//
//   - A Set is acknowledged (returns a nil error) only after the COMMIT of the
//     transaction holding its row returned successfully, and, on a group that
//     reads replicas (Options.Replicas), after its GTID was noted on the
//     group's validity gate (replicas.go); so is every other write. Concurrent Sets are
//     group-committed: a Set that finds no commit in flight writes its row
//     itself, on its caller's goroutine (a lone writer pays one round trip);
//     Sets arriving during a commit queue, and a committer goroutine takes up
//     to Options.MaxBatch of them (after Options.MaxWait, when that is set;
//     else after gathering the writers the last batch answered, for at most as
//     long as its statement took: see gatherLocked) and writes them as one
//     multi-row INSERT … ON DUPLICATE KEY UPDATE in one transaction, until
//     nothing is queued. Within a batch the last Set of a key wins. A batch
//     stops once every waiter's context has ended (or after batchTimeout):
//     the next batch never waits behind rows nobody waits for.
//   - Retry policy (WriteRows, for group commit and write-behind alike): a
//     deadlock (1213) or lock wait timeout (1205) reruns the whole batch, at
//     most lockRetries times after short growing pauses, never past the
//     context; a server error about one row's data (Refused) reruns each row
//     alone once, so one bad value does not fail its neighbours; any other
//     failure is every row's error at once.
//   - Buffers: the key and Item.Value a caller passes are only read during
//     the call and are the caller's again when it returns (a memcache
//     connection passes slices of its read buffer and reads over them next).
//     What outlives the call is copied once: Set copies key and value into one
//     allocation owned by its queued request, since the committer may write
//     or retry the row after Set gave up. Items returned to the caller are the
//     caller's.
//   - Reads (Get, GetMulti) run on a replica only when its applied position
//     covers every write keyway knows of to the table, read when the read is
//     sent (after the caller's stamp); else, and for every write and every
//     read inside a write, on the primary (replicas.go).
//   - Add, Replace, Append, Prepend, CompareAndSwap, IncrDecr, Touch and Delete
//     are each atomic in SQL: a single conditional statement where one
//     suffices, otherwise a transaction with SELECT … FOR UPDATE.
//   - Expired rows (expiry column ≠ 0 and ≤ now, in this process's clock) are
//     misses for every operation; Add and Set overwrite them.
//   - A container serves only once its table was checked (privileges, columns,
//     key index, max(cas)). The privileges are probed, not read from grants
//     (see checkPrivileges): SELECT, and INSERT, UPDATE, DELETE unless
//     Options.ReadOnly; a missing one fails Open naming it and the GRANT.
//     Open fails on a table that does not fit its Def, but not on a backend
//     it cannot reach: that container opens not checked, every operation
//     fails with a *NotCheckedError (the cause and the backend
//     named; not Refused, so a write-behind queue keeps its rows), and a
//     goroutine checks again with a growing pause until it passes or Close.
//     The check sets the column facts, then flips an atomic flag; nothing
//     reads those facts before it saw the flag. Until then NormKey is the key
//     itself. Hooks registered with OnLive run after the facts are set and
//     before the flip, so what they set up (a write-behind queue keying its
//     waiting writes by the live rule) is in place before any operation
//     sees the container live. "Waiting for its backend" and "checked,
//     serving" are logged once each.
//   - CAS values: with a cas column keyway assigns them from one monotonic
//     counter per table (schema.table), shared by every container on that
//     table (see casCounters) and raised when a container checks the table
//     (before it serves) to at least max(cas) of the table, so a CAS never
//     repeats while rows are written only through keyway. Containers on
//     different tables do not share a counter. Without a cas column the CAS
//     is a 64-bit FNV-1a hash of the value and flags (never 0): writing the
//     same value and flags again yields the same CAS, so a CompareAndSwap
//     against a stale CAS succeeds when the content was restored meanwhile
//     (ABA), and Touch keeps the CAS.
//   - Several value columns: a memcache value is split on Separator into the
//     columns (fewer parts fill the rest with empty strings, more parts are an
//     error naming the container); a read joins all columns with Separator.
//     With one value column the value is stored unsplit.
//   - Keys longer than the key column are ErrKeyTooLong (checked before any
//     SQL). Values too long for their column are ErrValueTooLong wrapping the
//     driver error; this relies on a strict sql_mode, which OpenDB's pools
//     set on every connection (STRICT_ALL_TABLES): on a pool without it a
//     non-strict server silently truncates. A row too large for a statement within the server's
//     max_allowed_packet is ErrValueTooLong too, before any SQL; a batch
//     (WriteRows, the committer's) takes as many rows as fit in one (BatchLen).
package container

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/gather"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/validity"
)

// Def describes one container (the InnoDB memcached plugin's `containers` row).
type Def struct {
	Name          string // "aaa"
	Schema, Table string
	KeyColumn     string
	ValueColumns  []string // one or more; joined with Separator in memcache values
	Separator     string   // "|" when empty
	FlagsColumn   string   // optional ("" = none)
	CASColumn     string   // optional
	ExpiryColumn  string   // optional
}

// Options tunes the group committer and says where the table lives.
type Options struct {
	MaxBatch int // Sets per transaction at most; 128 when ≤ 0
	// MaxWait, when set, queues every Set and has the committer wait this long before it takes each batch; 0 (the
	// default): no fixed wait, a lone Set writes itself and the committer gathers the writers its last batch
	// answered (gatherLocked).
	MaxWait time.Duration
	// Backend names where the table lives in errors and logs, such as "group main (127.0.0.1:3306)".
	Backend string
	// PoolDeadline, when not 0, says the pool ends a statement after this long without a packet either way
	// (OpenDB's pools: StatementTimeout). A statement whose caller's deadline is further away then runs unwatched
	// (see unwatched).
	PoolDeadline time.Duration
	// ReadOnly says the container never writes its table (its set, delete and flush policies never reach it), so
	// the check asks the account for SELECT alone, not INSERT, UPDATE and DELETE too.
	ReadOnly bool
	// Replicas, when its group reads replicas, sends the container's reads to replicas that have every write
	// keyway knows of to the table, and has each write note its GTID before it is acknowledged (replicas.go).
	// nil: every statement runs on the pool given to Open.
	Replicas *Replicas
	Logger   *slog.Logger // slog.Default() when nil
}

// Item is one memcache item.
type Item struct {
	Value   []byte
	Flags   uint32
	CAS     uint64
	Exptime int64 // absolute unix seconds, 0 never
}

// Status is the outcome of a conditional operation.
type Status int

const (
	Stored     Status = iota // the write happened
	NotStored                // add: key exists; replace/append/prepend: key missing
	Exists                   // cas: the item changed since the caller read it
	NotFound                 // the key is missing (or expired)
	Deleted                  // delete removed the row
	Touched                  // touch changed the expiry
	NonNumeric               // incr/decr on a value that is not a decimal uint64
)

func (s Status) String() string {
	switch s {
	case Stored:
		return "STORED"
	case NotStored:
		return "NOT_STORED"
	case Exists:
		return "EXISTS"
	case NotFound:
		return "NOT_FOUND"
	case Deleted:
		return "DELETED"
	case Touched:
		return "TOUCHED"
	case NonNumeric:
		return "NON_NUMERIC"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

var (
	// ErrKeyTooLong: the key does not fit the key column (or is empty).
	ErrKeyTooLong = errors.New("key too long for the key column")
	// ErrValueTooLong: a value does not fit its column.
	ErrValueTooLong = errors.New("value too long for the column")
	// ErrValueType: a value (or flags, or expiry) is not of its column's type:
	// not a number for an integer column, out of its range, or not valid UTF-8
	// for a utf8 text column.
	ErrValueType = errors.New("value does not fit the column's type")
	// ErrTooManyValues: the value has more Separator-parts than value columns.
	ErrTooManyValues = errors.New("value has more parts than the container has value columns")
	// ErrClosed: the container was closed.
	ErrClosed = errors.New("container closed")
)

// Stats count the container's multi-row writes (group commit and write-behind).
type Stats struct {
	Batches     uint64 `json:"batches"`      // statements WriteRows ran (including failed ones and retries)
	BatchedSets uint64 `json:"batched_rows"` // rows those statements carried (a retried row once per statement)
}

// CAS counters: one per table, shared by every container on it. A table
// may back several containers (the plugin's containers table allows it, and
// a config may name one table twice): if each had its own counter, both
// would start from the same max(cas) and hand out the same CAS for
// different writes of a row, so a gets on one and a cas on the other could
// succeed against content that changed. Containers on different tables need
// nothing from each other, so a table's counter is not raised by another
// table's writes. The registry is keyed by "schema.table" in lower case (two
// names that may be one table share a counter: sharing never repeats a CAS,
// only separate counters can) and is never pruned: it holds one counter per
// table this process opened.
var casCounters struct {
	mu sync.Mutex
	m  map[string]*casCounter
}

// casCounter is the CAS source of one table.
type casCounter struct{ n atomic.Uint64 }

// casCounterFor returns the table's counter, making it on first use.
func casCounterFor(schema, table string) *casCounter {
	k := strings.ToLower(schema) + "." + strings.ToLower(table)
	casCounters.mu.Lock()
	defer casCounters.mu.Unlock()
	if casCounters.m == nil {
		casCounters.m = map[string]*casCounter{}
	}
	cc := casCounters.m[k]
	if cc == nil {
		cc = &casCounter{}
		casCounters.m[k] = cc
	}
	return cc
}

func (cc *casCounter) next() uint64 { return cc.n.Add(1) }

// raise makes the counter at least v.
func (cc *casCounter) raise(v uint64) {
	for {
		cur := cc.n.Load()
		if cur >= v || cc.n.CompareAndSwap(cur, v) {
			return
		}
	}
}

// Container runs memcache operations on one table.
type Container struct {
	db  *sql.DB
	def Def
	opt Options
	sh  *sharded // a router of a sharded table (shards.go); nil for a container on one pool

	sep    string
	table  string              // `schema`.`table`
	cas    *casCounter         // the table's CAS source (see casCounters)
	ids    [1]validity.TableID // the table, as validity names it (its positions: replicas.go)
	qKey   string
	qVals  []string
	qFlags string // "" when none
	qCAS   string
	qExp   string
	stmt   statements // built once by Open from the names above
	// lower are the mapped columns' names in lower case, as a binlog image names them (FromImage); set by Open.
	lower struct {
		vals            []string
		flags, cas, exp string
	}
	// The checked fields: set once by check, before checked turns true, and
	// read only after notLive returned nil (see Open).
	keyChars int64 // CHARACTER_MAXIMUM_LENGTH of the key column
	keyText  bool  // CHAR/VARCHAR (length in characters), not BINARY/VARBINARY (bytes)
	keyFold  bool  // key collation case-insensitive (for GetMulti matching)
	keyPad   bool  // key compares ignoring trailing spaces
	valCols  []fit // what each value column accepts, in ValueColumns order
	flagsFit fit   // the flags column's range (when there is one)
	expFit   fit   // the expiry column's range
	// maxPacket is the server's max_allowed_packet: an upsert's rows stay within statementBudget of it (BatchLen).
	// Read when the table is checked, and lowered when a statement loses its connection and the server's global
	// value is now smaller (see lowerMaxPacket).
	maxPacket atomic.Int64

	checked   atomic.Bool                      // the table was checked: the checked fields are set
	liveMu    sync.Mutex                       // orders OnLive registrations with going live
	onLive    []func(norm func(string) string) // run once, before checked turns true (under liveMu)
	why       atomic.Pointer[error]            // while not live: why the last check failed
	stopCheck chan struct{}                    // closed by Close: checkLoop stops
	checkDone chan struct{}                    // closed when no check runs any more

	// The group committer (see Set): mu guards closed, committing and queue. committing is true while a commit is
	// in flight; committers counts that commit (0 or 1), so Close can wait for the queue to drain.
	mu         sync.Mutex
	closed     bool
	committing bool
	queue      []*setReq
	committers sync.WaitGroup
	// Gathering (see gatherLocked): the Sets the last batch answered and how long its statement took, the queue
	// length a gathering committer waits for (0: none waits), the signal that the queue reached it, and the bound of
	// a wait. lastRows, gathering and gatherMax are guarded by mu; lastExec and gather belong to the one committer
	// in flight.
	lastRows  int
	lastExec  time.Duration
	gathering int
	grown     chan struct{} // buffered (1)
	gatherMax time.Duration
	gather    gather.Gatherer

	batches     atomic.Uint64
	batchedSets atomic.Uint64
	reads       atomic.Uint64 // row reads sent to the table (Reads)
}

// column is one row of information_schema.COLUMNS.
type column struct {
	dataType  string
	colType   string
	maxChars  sql.NullInt64
	maxOctets sql.NullInt64
	collation sql.NullString
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// Open checks def against the table's real columns and key index and starts
// the container's group committer. The error names the container and the
// offending column on a mismatch.
//
// When the backend cannot be reached (see unreachable), Open does not fail:
// it returns the container not checked yet. Every operation then fails with
// a *NotCheckedError naming the container, the backend and the cause, and a
// goroutine checks the table again with a growing pause (checkRetryMin …
// checkRetryMax) until it succeeds or Close; then the container serves. A
// table that turns out not to fit at such a late check keeps the container
// not checked (and is logged): it is retried like an unreachable backend,
// since there is no startup left to fail.
func Open(ctx context.Context, db *sql.DB, def Def, o Options) (*Container, error) {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 128
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if def.Separator == "" {
		def.Separator = "|"
	}
	if def.Schema == "" || def.Table == "" || def.KeyColumn == "" || len(def.ValueColumns) == 0 {
		return nil, failf(def, "schema, table, key column and at least one value column are required")
	}
	c := &Container{
		db: db, def: def, opt: o, sep: def.Separator,
		table: quoteIdent(def.Schema) + "." + quoteIdent(def.Table),
		qKey:  quoteIdent(def.KeyColumn),
		cas:   casCounterFor(def.Schema, def.Table),
		ids:   [1]validity.TableID{{Schema: strings.ToLower(def.Schema), Name: strings.ToLower(def.Table)}}, // as the engine names it
		grown: make(chan struct{}, 1), gatherMax: gather.Limit,
	}
	for _, v := range def.ValueColumns {
		c.qVals = append(c.qVals, quoteIdent(v))
	}
	if def.FlagsColumn != "" {
		c.qFlags = quoteIdent(def.FlagsColumn)
	}
	if def.CASColumn != "" {
		c.qCAS = quoteIdent(def.CASColumn)
	}
	if def.ExpiryColumn != "" {
		c.qExp = quoteIdent(def.ExpiryColumn)
	}
	c.stmt = c.buildStatements()
	for _, v := range def.ValueColumns {
		c.lower.vals = append(c.lower.vals, strings.ToLower(v))
	}
	c.lower.flags, c.lower.cas, c.lower.exp = strings.ToLower(def.FlagsColumn), strings.ToLower(def.CASColumn), strings.ToLower(def.ExpiryColumn)
	c.checkDone = make(chan struct{})
	c.stopCheck = make(chan struct{})
	switch err := c.check(ctx); {
	case err == nil:
		close(c.checkDone)
	case unreachable(err):
		c.setWhy(err)
		o.Logger.Warn("container waiting for its backend: its keys answer SERVER_ERROR until the table is checked",
			"container", def.Name, "backend", o.Backend, "err", err)
		go c.checkLoop()
	default:
		return nil, err
	}
	return c, nil
}

// failf is an error about def's table.
func failf(def Def, format string, args ...any) error {
	return fmt.Errorf("container %q (%s.%s): %s", def.Name, def.Schema, def.Table, fmt.Sprintf(format, args...))
}

// unreachableError is a query of the check that failed for want of a
// backend, not because of the table.
type unreachableError struct {
	what string
	err  error
}

func (e *unreachableError) Error() string { return e.what + ": " + e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// Server errors that say the server is there but cannot serve yet (it is
// starting, stopping or full): a later check may pass.
var transientErrors = map[uint16]bool{
	mysqlwire.ERConCount:       true, // too many connections
	mysqlwire.ERServerShutdown: true, // server shutdown in progress
}

// readFail wraps the error of a query the check ran: an *unreachableError
// when the backend could not be reached (the group's *backend.UnavailableError,
// a lost connection, anything that is not a server's answer, or one of
// transientErrors), else an error naming the container and what failed that
// wraps the server's (a refusal, such as access denied, is configuration to
// fix: the caller, who knows which setting holds the account, says which).
// Missing privileges and a missing table are not found here: checkPrivileges
// and the column check name them with their fixes.
func readFail(def Def, what string, err error) error {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || transientErrors[me.Number] {
		return &unreachableError{what: what, err: err}
	}
	return fmt.Errorf("container %q (%s.%s): %s: %w", def.Name, def.Schema, def.Table, what, err)
}

// unreachable reports whether err (from check) means the backend could not
// be reached, so the check is worth trying again later.
func unreachable(err error) bool {
	var ue *unreachableError
	return errors.As(err, &ue)
}

// check reads the table's columns and key index, checks them against the
// definition and, when they fit, sets the checked fields, raises the CAS
// counter to the table's max(cas) and marks the container live, in that
// order: a reader that sees it live sees the fields.
func (c *Container) check(ctx context.Context) error {
	def, db := c.def, c.db
	fail := func(format string, args ...any) error { return failf(def, format, args...) }

	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_MAXIMUM_LENGTH,
		CHARACTER_OCTET_LENGTH, COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`,
		def.Schema, def.Table)
	if err != nil {
		return readFail(def, "read columns", err)
	}
	cols := map[string]column{}
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.dataType, &c.colType, &c.maxChars, &c.maxOctets, &c.collation); err != nil {
			rows.Close()
			return readFail(def, "read columns", err)
		}
		c.dataType = strings.ToLower(c.dataType)
		c.colType = strings.ToLower(c.colType)
		cols[strings.ToLower(name)] = c
	}
	if err := rows.Close(); err != nil {
		return readFail(def, "read columns", err)
	}
	if err := rows.Err(); err != nil {
		return readFail(def, "read columns", err)
	}
	// Before judging the columns: information_schema lists only those the account may use, so without privileges
	// the table would look missing (or a column would), and with SELECT alone every set would fail later.
	if err := c.checkPrivileges(ctx); err != nil {
		return err
	}
	if len(cols) == 0 {
		return fail("table does not exist: create it, or fix the container's table")
	}

	check := func(role, name string, ok func(column) bool, want string) (column, error) {
		c, found := cols[strings.ToLower(name)]
		if !found {
			return c, fail("%s column %q does not exist", role, name)
		}
		if !ok(c) {
			return c, fail("%s column %q is %s, want %s", role, name, c.colType, want)
		}
		return c, nil
	}
	isKeyType := func(c column) bool {
		switch c.dataType {
		case "char", "varchar", "binary", "varbinary":
			return c.maxChars.Valid && c.maxOctets.Valid
		}
		return false
	}
	isInt := func(c column) bool {
		switch c.dataType {
		case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
			return true
		}
		return false
	}
	isValue := func(c column) bool {
		switch c.dataType {
		case "char", "varchar", "binary", "varbinary", "tinytext", "text", "mediumtext", "longtext",
			"tinyblob", "blob", "mediumblob", "longblob":
			return true
		}
		return isInt(c) || c.dataType == "decimal"
	}
	// Flags and expiry take INT or BIGINT, signed too: the plugin's own demo
	// table (demo_test) declares both as plain INT. A value that does not fit
	// is refused by the server in strict mode.
	isFlags := func(c column) bool {
		return c.dataType == "bigint" || c.dataType == "int" || c.dataType == "integer"
	}
	isCAS := func(c column) bool { return c.dataType == "bigint" && strings.Contains(c.colType, "unsigned") }
	isExp := isFlags

	keyCol, err := check("key", def.KeyColumn, isKeyType, "CHAR, VARCHAR, BINARY or VARBINARY")
	if err != nil {
		return err
	}
	for _, v := range def.ValueColumns {
		if _, err := check("value", v, isValue, "a string, blob or integer type"); err != nil {
			return err
		}
	}
	if def.FlagsColumn != "" {
		if _, err := check("flags", def.FlagsColumn, isFlags, "INT or BIGINT"); err != nil {
			return err
		}
	}
	if def.CASColumn != "" {
		if _, err := check("cas", def.CASColumn, isCAS, "BIGINT UNSIGNED"); err != nil {
			return err
		}
	}
	if def.ExpiryColumn != "" {
		if _, err := check("expiry", def.ExpiryColumn, isExp, "INT or BIGINT"); err != nil {
			return err
		}
	}
	if err := checkKeyIndex(ctx, db, def); err != nil {
		return err
	}
	var maxPacket int64
	if err := db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		return readFail(def, "read max_allowed_packet", err)
	}
	var maxCAS sql.Null[uint64]
	if def.CASColumn != "" {
		if err := db.QueryRowContext(ctx, "SELECT MAX("+c.qCAS+") FROM "+c.table).Scan(&maxCAS); err != nil {
			return readFail(def, fmt.Sprintf("read max(%s)", def.CASColumn), err)
		}
	}

	// Checked: set the fields, then go live (see notLive).
	c.keyChars = keyCol.maxChars.Int64
	c.keyText = keyCol.dataType == "char" || keyCol.dataType == "varchar"
	if keyCol.collation.Valid {
		coll := strings.ToLower(keyCol.collation.String)
		c.keyFold = strings.HasSuffix(coll, "_ci") || strings.Contains(coll, "_ci_")
		c.keyPad = !strings.Contains(coll, "nopad")
	}
	for _, v := range def.ValueColumns {
		c.valCols = append(c.valCols, fitOf(v, cols[strings.ToLower(v)]))
	}
	if def.FlagsColumn != "" {
		c.flagsFit = fitOf(def.FlagsColumn, cols[strings.ToLower(def.FlagsColumn)])
	}
	if def.ExpiryColumn != "" {
		c.expFit = fitOf(def.ExpiryColumn, cols[strings.ToLower(def.ExpiryColumn)])
	}
	c.maxPacket.Store(maxPacket)
	if maxCAS.Valid {
		// Before going live: no operation can assign a CAS until then.
		c.cas.raise(maxCAS.V)
	}
	c.liveMu.Lock()
	for _, f := range c.onLive {
		f(c.normLive)
	}
	c.onLive = nil
	c.checked.Store(true)
	c.liveMu.Unlock()
	return nil
}

// Server errors that refuse a statement for want of a privilege.
var privilegeErrors = map[uint16]bool{
	mysqlwire.ERDBAccessDenied:     true,
	mysqlwire.ERTableAccessDenied:  true,
	mysqlwire.ERColumnAccessDenied: true,
}

// checkPrivileges asks the server whether the account may run what the container runs on its table: SELECT of its
// columns (a SELECT … LIMIT 0, which reads no row) and, unless Options.ReadOnly, INSERT, UPDATE and DELETE of them
// (EXPLAIN of each: the server checks the statement's privileges as for the statement itself, and runs nothing, so
// nothing is written and nothing reaches the binlog). Probing instead of reading SHOW GRANTS or
// information_schema's *_PRIVILEGES leaves it to the server to combine every way a privilege can be held: global,
// schema (wildcard patterns too), table and column grants, and the account's default role. Not covered: DROP,
// which flush_all's TRUNCATE TABLE needs (flush_all fails alone without it). A probe that fails for another reason
// (a table that does not exist, a server that cannot EXPLAIN the statement) proves nothing and is not an error
// here; the column check names a missing table.
func (c *Container) checkPrivileges(ctx context.Context) error {
	cols := c.writeCols()
	nulls := strings.TrimSuffix(strings.Repeat("NULL, ", len(cols)+1), ", ")
	set := make([]string, len(cols))
	for i, col := range cols {
		set[i] = col + " = NULL"
	}
	probes := []struct{ priv, q string }{
		{"SELECT", "SELECT " + c.selectList() + " FROM " + c.table + " LIMIT 0"},
	}
	if !c.opt.ReadOnly {
		probes = append(probes,
			struct{ priv, q string }{"INSERT", "EXPLAIN " + c.stmt.upsert + "(" + nulls + ")"},
			struct{ priv, q string }{"UPDATE", "EXPLAIN UPDATE " + c.table + " SET " + strings.Join(set, ", ") + " WHERE FALSE"},
			struct{ priv, q string }{"DELETE", "EXPLAIN DELETE FROM " + c.table + " WHERE FALSE"},
		)
	}
	var missing []string
	for _, p := range probes {
		rows, err := c.db.QueryContext(ctx, p.q)
		if err == nil {
			err = rows.Close()
		}
		var me *mysql.MySQLError
		switch {
		case err == nil:
		case errors.As(err, &me) && privilegeErrors[me.Number]:
			missing = append(missing, p.priv)
		case !errors.As(err, &me) || transientErrors[me.Number]:
			return readFail(c.def, "check privileges", err)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	account := "the account"
	var user string
	if err := c.db.QueryRowContext(ctx, "SELECT CURRENT_USER()").Scan(&user); err == nil {
		if i := strings.LastIndexByte(user, '@'); i >= 0 {
			account = "'" + user[:i] + "'@'" + user[i+1:] + "'"
		}
	}
	grantee := account
	if grantee == "the account" {
		grantee = "<keyway's account>"
	}
	why := ""
	if missing[0] == "SELECT" {
		why = " (or the table does not exist: the server does not say which to an account without privileges on it)"
	}
	return failf(c.def, "%s lacks privileges the container needs on %s: %s%s; grant them with: GRANT %s ON %s TO %s",
		account, c.table, strings.Join(missing, ", "), why, strings.Join(missing, ", "), c.table, grantee)
}

// OnLive registers f to run once when the container goes live: after the
// table's facts are set and before anything can see the container live
// (Checked, NotChecked, NormKey and every operation still answer "not
// checked" while f runs). f gets the key rule NormKey follows from then on;
// it runs on the goroutine that checked the table and must not call the
// container. OnLive reports false, without registering f, when the container
// is live already (then NormKey is that rule).
//
// A write-behind queue uses it to key its waiting writes by the live rule
// before any command can act on a row under it (see package writebehind).
func (c *Container) OnLive(f func(norm func(string) string)) bool {
	if c.sh != nil {
		return false // each part goes live alone (shards.go)
	}
	c.liveMu.Lock()
	defer c.liveMu.Unlock()
	if c.checked.Load() {
		return false
	}
	c.onLive = append(c.onLive, f)
	return true
}

// Pauses between checks of a container whose backend was unreachable.
const (
	checkRetryMin = 100 * time.Millisecond
	checkRetryMax = 2 * time.Second
	checkTimeout  = 10 * time.Second // one check's queries at most
)

// checkLoop checks the table again, with a growing pause, until the check
// passes (the container goes live) or Close. It logs the container serving
// once, and a table that does not fit the definition once per distinct
// reason.
func (c *Container) checkLoop() {
	defer close(c.checkDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.stopCheck:
			cancel()
		case <-ctx.Done():
		}
	}()
	pause, logged := checkRetryMin, ""
	for {
		select {
		case <-c.stopCheck:
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, checkRetryMax)
		cctx, ccancel := context.WithTimeout(ctx, checkTimeout)
		err := c.check(cctx)
		ccancel()
		if err == nil {
			c.opt.Logger.Info("container checked, serving", "container", c.def.Name, "backend", c.opt.Backend)
			return
		}
		if ctx.Err() != nil {
			return
		}
		c.setWhy(err)
		if !unreachable(err) && err.Error() != logged {
			logged = err.Error()
			c.opt.Logger.Error("container check failed: its table does not fit the definition; checking again until it does",
				"container", c.def.Name, "backend", c.opt.Backend, "err", err)
		}
	}
}

func (c *Container) setWhy(err error) { c.why.Store(&err) }

// NotCheckedError is the error of every operation on a container whose
// table has not been checked yet (its backend was unreachable when it
// opened; see Open).
type NotCheckedError struct {
	Container string
	Backend   string // Options.Backend
	Err       error  // why the last check failed
}

func (e *NotCheckedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "container %q not checked against its table yet", e.Container)
	cause := e.Err
	var ue *backend.UnavailableError
	switch {
	case errors.As(cause, &ue):
		// Name the group once: the group's error repeats it.
		fmt.Fprintf(&b, ": backend group %s (%s) unavailable: %v", ue.Group, ue.Addr, ue.Err)
		return b.String()
	case unreachable(cause) && e.Backend != "":
		fmt.Fprintf(&b, ": backend %s unavailable", e.Backend)
	case e.Backend != "":
		fmt.Fprintf(&b, " (backend %s)", e.Backend)
	}
	fmt.Fprintf(&b, ": %v", cause)
	return b.String()
}

func (e *NotCheckedError) Unwrap() error { return e.Err }

// notLive is nil once the container is checked (live), else its
// *NotCheckedError. Every operation asks it first: the checked fields
// (keyChars … expFit) may be read only after it returned nil.
func (c *Container) notLive() error {
	if c.checked.Load() {
		return nil
	}
	return &NotCheckedError{Container: c.def.Name, Backend: c.opt.Backend, Err: *c.why.Load()}
}

// Checked reports whether the container's table has been checked, so it
// serves.
func (c *Container) Checked() bool {
	if c.sh != nil {
		return c.shardedNotChecked() == nil
	}
	return c.checked.Load()
}

// NotChecked is nil once the container is live, else the *NotCheckedError
// its operations fail with.
func (c *Container) NotChecked() error {
	if c.sh != nil {
		return c.shardedNotChecked()
	}
	return c.notLive()
}

// checkKeyIndex requires the primary key or a unique index on exactly the key
// column (no prefix).
func checkKeyIndex(ctx context.Context, db *sql.DB, def Def) error {
	rows, err := db.QueryContext(ctx, `SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0`, def.Schema, def.Table)
	if err != nil {
		return readFail(def, "read indexes", err)
	}
	defer rows.Close()
	type idx struct {
		cols   []string
		prefix bool
	}
	idxs := map[string]*idx{}
	for rows.Next() {
		var name, col string
		var sub sql.NullInt64
		if err := rows.Scan(&name, &col, &sub); err != nil {
			return readFail(def, "read indexes", err)
		}
		x := idxs[name]
		if x == nil {
			x = &idx{}
			idxs[name] = x
		}
		x.cols = append(x.cols, col)
		x.prefix = x.prefix || sub.Valid
	}
	if err := rows.Err(); err != nil {
		return readFail(def, "read indexes", err)
	}
	for _, x := range idxs {
		if len(x.cols) == 1 && strings.EqualFold(x.cols[0], def.KeyColumn) && !x.prefix {
			return nil
		}
	}
	return failf(def, "key column %q is neither the primary key nor a unique index on exactly that column", def.KeyColumn)
}

// Def returns the container's definition (Separator defaulted).
func (c *Container) Def() Def { return c.def }

// Stats returns the group committer's counters.
func (c *Container) Stats() Stats {
	if c.sh != nil {
		return c.shardedStats()
	}
	return Stats{Batches: c.batches.Load(), BatchedSets: c.batchedSets.Load()}
}

// Reads counts the reads of rows the container sent to its table (one per Get, one per GetMulti query; a sharded
// container's are its parts'), whether they found a row or failed. A caching container's reads answered by a held
// copy never get here: tests count cache hits by it.
func (c *Container) Reads() uint64 {
	if c.sh != nil {
		var n uint64
		for _, p := range *c.sh.order.Load() {
			n += p.Reads()
		}
		return n
	}
	return c.reads.Load()
}

// Close stops checking the table (when it was not checked yet) and the group
// committer after it answered every queued Set. Sets after Close return
// ErrClosed.
func (c *Container) Close() error {
	if c.sh != nil {
		return c.shardedClose()
	}
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.stopCheck)
	}
	c.mu.Unlock()
	<-c.checkDone
	c.committers.Wait() // what is queued is still written
	return nil
}

func (c *Container) errorf(format string, args ...any) error {
	return fmt.Errorf("container %q: "+format, append([]any{c.def.Name}, args...)...)
}

// checkKey rejects keys that cannot fit the key column, and every key while
// the table is not checked (see notLive).
func (c *Container) checkKey(key []byte) error {
	if err := c.notLive(); err != nil {
		return err
	}
	if len(key) == 0 {
		return c.errorf("%w: empty key", ErrKeyTooLong)
	}
	n := int64(len(key)) // BINARY/VARBINARY: bytes
	if c.keyText {
		n = int64(utf8.RuneCount(key)) // CHAR/VARCHAR: characters, in whatever charset the column has
	}
	if n > c.keyChars {
		return c.errorf("%w: %d bytes, column %s holds %d characters", ErrKeyTooLong, len(key), c.def.KeyColumn, c.keyChars)
	}
	return nil
}

// appendSplit appends to dst the memcache value v as one argument per value column.
func (c *Container) appendSplit(dst []any, v []byte) ([]any, error) {
	n := len(c.qVals)
	if n == 1 {
		if err := c.valCols[0].checkBytes(v); err != nil {
			return nil, c.errorf("%w", err)
		}
		return append(dst, nonNil(v)), nil
	}
	parts := strings.Split(string(v), c.sep)
	if len(parts) > n {
		return nil, c.errorf("%w: %d parts, %d value columns", ErrTooManyValues, len(parts), n)
	}
	for i := range n {
		part := ""
		if i < len(parts) {
			part = parts[i]
		}
		if err := c.valCols[i].checkBytes([]byte(part)); err != nil {
			return nil, c.errorf("%w", err)
		}
		dst = append(dst, part)
	}
	return dst, nil
}

// Check reports whether key and it can be written to the table (the key
// fits the key column; the value, flags and expiry fit theirs) without
// writing anything. A nil error does not promise the server accepts the row,
// only that keyway knows no reason it would not.
func (c *Container) Check(key []byte, it Item) error {
	if c.sh != nil {
		p, err := c.PartFor(context.Background(), key)
		if err != nil {
			return err
		}
		return p.Check(key, it)
	}
	if err := c.checkKey(key); err != nil {
		return err
	}
	return c.checkWrite(it)
}

// The server ends the connection of a client that sends a statement longer than its max_allowed_packet, rather than
// failing the statement: a batch sent again as it was would never get through (a write-behind round of 256 values
// of 100 KB each was retried for as long as keyway ran, its rows acknowledged and never in the table), so every
// upsert is kept within the server's limit. rowBytes bounds what one row adds to the statement as the driver
// interpolates it (every byte of key and value escaped, at most two each, and a few bytes per column for quotes,
// separators and numbers); statementBudget is what the rows may take, the limit less room for the statement's own
// text.
func (c *Container) rowBytes(key []byte, it Item) int64 {
	return 2*int64(len(key)+len(it.Value)) + c.rowTupleBytes()
}

// rowTupleBytes is what a row's tuple takes in the statement beyond its bytes of key and value.
func (c *Container) rowTupleBytes() int64 { return int64(1+c.writeWidth()) * columnBytes }

const (
	columnBytes    = 32  // per column of a row: quotes, _binary prefixes, commas, a number's digits
	statementSlack = 256 // the packet's header and command byte, and room for the driver's own spelling
)

// statementBudget is what an upsert's rows may take of max_allowed_packet: the limit less the statement's own text
// (INSERT … ON DUPLICATE KEY UPDATE with every name) and one key as long as the key column allows (checkRowBytes
// counts a row without its key): a few hundred bytes and twice the longest key, so that a small max_allowed_packet
// (MariaDB allows down to 1 KiB; 16 KiB in the test) still takes the rows that fit it.
func (c *Container) statementBudget() int64 {
	keyBytes := c.keyChars // BINARY/VARBINARY: bytes
	if c.keyText {
		keyBytes *= utf8.UTFMax // CHAR/VARCHAR: characters, each at most 4 bytes of keyway's UTF-8
	}
	own := int64(len(c.stmt.upsert)+len(c.stmt.onDup)) + 2*keyBytes + columnBytes + statementSlack
	return c.maxPacket.Load() - own
}

// maxPacketReadTimeout bounds lowerMaxPacket's query: it runs after a statement failed, on the writer's way out.
const maxPacketReadTimeout = 2 * time.Second

// maxPacketReadAttempts is how many connections lowerMaxPacket's query may try: the pool can hold more than one the
// server ended.
const maxPacketReadAttempts = 3

// lowerMaxPacket is told that an upsert failed with err. When err is the connection's and not the statement's (the
// server ends the connection of a client whose packet passes max_allowed_packet, which the client sees as a broken
// pipe or a reset, or as error 1153 when the reply comes first), it reads the server's global max_allowed_packet,
// which every new connection takes, and keeps it if it is smaller than the one the table was checked with: a DBA
// who lowers it while keyway runs would otherwise have every later batch of that size fail the same way, and the
// write-behind retry its round for as long as keyway runs. A larger value waits for the next check (a connection
// opened before the change still has the smaller one).
func (c *Container) lowerMaxPacket(ctx context.Context, err error) {
	var me *mysql.MySQLError
	if err == nil || (errors.As(err, &me) && me.Number != mysqlwire.ERNetPacketTooLarge) || ctx.Err() != nil {
		return
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxPacketReadTimeout)
	defer cancel()
	var global int64
	for attempt := 0; ; attempt++ {
		err := c.db.QueryRowContext(qctx, "SELECT @@GLOBAL.max_allowed_packet").Scan(&global)
		if err == nil {
			break
		}
		// The pool may hand out the connection the server has just ended for the oversized packet (its error
		// reply came before the close): the driver then says ErrInvalidConn, which database/sql does not retry.
		if !errors.Is(err, mysql.ErrInvalidConn) || attempt == maxPacketReadAttempts-1 {
			return // the server is unreachable: what failed was not the packet's size, or cannot be told now
		}
	}
	for {
		cur := c.maxPacket.Load()
		if global >= cur || c.maxPacket.CompareAndSwap(cur, global) {
			return
		}
	}
}

// checkRowBytes refuses a value that could not go even alone in a statement the server accepts; every statement
// that writes a row builds its arguments with appendWriteArgs, which asks this first. (The key is left out: the key
// column bounds it, and statementBudget leaves room for the longest.) Past rowBytes' bound, it counts the bytes
// the driver escapes, so a large value of few such bytes is not refused for the bound.
func (c *Container) checkRowBytes(it Item) error {
	budget := c.statementBudget()
	if c.rowBytes(nil, it) <= budget {
		return nil
	}
	n := int64(len(it.Value)+escapes(it.Value)) + c.rowTupleBytes()
	if n > budget {
		return c.errorf("%w: the row takes %d bytes of a statement, and the server's max_allowed_packet (%d) leaves room for %d",
			ErrValueTooLong, n, c.maxPacket.Load(), max(budget, 0))
	}
	return nil
}

// escapes counts the bytes of b that go-sql-driver's interpolation escapes with a backslash (with the server's
// NO_BACKSLASH_ESCAPES it escapes fewer: only quotes).
func escapes(b []byte) int {
	n := 0
	for _, x := range b {
		switch x {
		case 0, '\n', '\r', 0x1a, '\'', '"', '\\':
			n++
		}
	}
	return n
}

// BatchLen is how many of rows, from the first, one WriteRows statement can carry within the server's
// max_allowed_packet (see rowBytes): at least one.
func (c *Container) BatchLen(rows []Row) int {
	if c.sh != nil {
		if p := c.checkedPart(); p != nil {
			return p.BatchLen(rows)
		}
		return min(len(rows), 1)
	}
	return c.batchLen(len(rows), func(i int) ([]byte, Item) { return rows[i].Key, rows[i].Item })
}

// batchLen is BatchLen over n rows that row gives.
func (c *Container) batchLen(n int, row func(i int) ([]byte, Item)) int {
	budget := c.statementBudget()
	for i := range n {
		if budget -= c.rowBytes(row(i)); budget < 0 {
			return max(i, 1)
		}
	}
	return n
}

// AsStored returns it as a SELECT of key's row returns it right after it was written with CAS cas (what Set, Add,
// Replace or CompareAndSwap returned): each value column's bytes as the column keeps them (CHAR drops trailing
// spaces, BINARY(n) pads, integers read back canonical) and, without a cas column, the CAS a read computes from
// them. ok is false when keyway cannot tell what the table returns (a column type it does not model): then only a
// read of the row knows. it must have passed Check (every write does).
func (c *Container) AsStored(it Item, cas uint64) (stored Item, ok bool) {
	if c.sh != nil {
		if p := c.checkedPart(); p != nil {
			return p.AsStored(it, cas)
		}
		return Item{}, false
	}
	stored = it
	if len(c.valCols) == 1 {
		if stored.Value, ok = c.valCols[0].asStored(it.Value); !ok {
			return Item{}, false
		}
		stored.Value = nonNil(stored.Value)
	} else {
		parts := strings.Split(string(it.Value), c.sep)
		out := make([][]byte, len(c.valCols))
		for i, f := range c.valCols {
			var part []byte
			if i < len(parts) {
				part = []byte(parts[i])
			}
			if out[i], ok = f.asStored(part); !ok {
				return Item{}, false
			}
		}
		stored.Value = joinBytes(out, c.sep)
	}
	stored.CAS = cas
	if c.qCAS == "" {
		stored.CAS = hashCAS(stored.Value, stored.Flags)
	}
	return stored, true
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// hashCAS is the CAS of a container without a cas column: FNV-1a 64 of the
// value followed by the flags (little endian), never 0.
func hashCAS(v []byte, flags uint32) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, b := range v {
		h ^= uint64(b)
		h *= prime
	}
	for i := 0; i < 4; i++ {
		h ^= uint64(byte(flags >> (8 * i)))
		h *= prime
	}
	if h == 0 {
		h = 1
	}
	return h
}

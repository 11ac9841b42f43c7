package container

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// mapErr turns "Data too long for column" into ErrKeyTooLong/ErrValueTooLong
// (wrapping the driver error) and names the container on every error.
func (c *Container) mapErr(err error) error {
	if err == nil {
		return nil
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == mysqlwire.ERDataTooLong {
		if strings.Contains(strings.ToLower(me.Message), "'"+strings.ToLower(c.def.KeyColumn)+"'") {
			return c.errorf("%w: %w", ErrKeyTooLong, err)
		}
		return c.errorf("%w: %w", ErrValueTooLong, err)
	}
	return c.errorf("%w", err)
}

// ErrOutcomeUnknown is in the error of a write whose connection to MySQL broke after the statement may have
// reached the server (a primary that died, a failover): the write may have been applied, and keyway does not send
// it again. The memcache door's SERVER_ERROR says so. It covers autocommit writes (set, add, delete, cas, incr,
// append… outside a transaction) and a COMMIT cut off; a statement cut inside a transaction is known not to have
// applied (its transaction dies with the connection).
var ErrOutcomeUnknown = errors.New("its outcome is unknown: it may have been applied, and keyway did not send it again")

// writeErr is mapErr for the error of an autocommit write: a connection lost after the statement went out (the
// driver's ErrInvalidConn; one lost before, the driver's ErrBadConn, is retried on another connection by
// database/sql, and a dial that fails sent nothing) leaves its outcome unknown, and the error says so.
func (c *Container) writeErr(err error) error {
	if err != nil && errors.Is(err, mysql.ErrInvalidConn) {
		return c.errorf("the connection to MySQL was lost during the write (%w): %w", err, ErrOutcomeUnknown)
	}
	return c.mapErr(err)
}

func now() int64 { return time.Now().Unix() }

// live is the SQL condition "the row has not expired" and its arguments.
func (c *Container) live() (string, []any) {
	if c.qExp == "" {
		return c.stmt.liveCond, nil
	}
	return c.stmt.liveCond, []any{now()}
}

func expired(exp int64, t int64) bool { return exp != 0 && exp <= t }

// statements are the SQL texts of the hot operations, built once when the container opens (its columns are fixed
// then), so a get or a set does not rebuild them.
type statements struct {
	get      string // SELECT selectList FROM table WHERE key = ?
	getIn    string // the same up to "WHERE key IN (": GetMulti appends the placeholders
	upsert   string // INSERT … VALUES (head, up to the tuples
	tuple    string // one row's placeholders, "(?, …)"
	onDup    string // " ON DUPLICATE KEY UPDATE col = VALUES(col), …"
	upsert1  string // the whole one-row upsert: a lone writer's statement
	delete   string // DELETE FROM table WHERE key = ?
	liveCond string // the "not expired" condition (see live)
}

func (c *Container) buildStatements() statements {
	var s statements
	sel := "SELECT " + c.selectList() + " FROM " + c.table + " WHERE " + c.qKey
	s.get, s.getIn = sel+" = ?", sel+" IN ("
	cols := c.writeCols()
	s.upsert = "INSERT INTO " + c.table + " (" + c.qKey + ", " + strings.Join(cols, ", ") + ") VALUES "
	s.tuple = "(?" + strings.Repeat(", ?", len(cols)) + ")"
	set := make([]string, len(cols))
	for i, col := range cols {
		set[i] = col + " = VALUES(" + col + ")"
	}
	s.onDup = " ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
	s.upsert1 = s.upsert + s.tuple + s.onDup
	s.delete = "DELETE FROM " + c.table + " WHERE " + c.qKey + " = ?"
	s.liveCond = "1"
	if c.qExp != "" {
		s.liveCond = "(" + c.qExp + " IS NULL OR " + c.qExp + " = 0 OR " + c.qExp + " > ?)"
	}
	return s
}

// selectList is key, value columns, then the optional flags, cas and expiry.
func (c *Container) selectList() string {
	s := []string{c.qKey}
	s = append(s, c.qVals...)
	for _, q := range []string{c.qFlags, c.qCAS, c.qExp} {
		if q != "" {
			s = append(s, q)
		}
	}
	return strings.Join(s, ", ")
}

// scanItem reads one row in selectList order. ok is false for an expired row.
func (c *Container) scanItem(sc interface{ Scan(...any) error }) (key string, it Item, ok bool, err error) {
	// One allocation for the scan targets that escape to Scan, one for the list of them.
	var t struct {
		flags, exp sql.NullInt64
		cas        sql.Null[uint64]
		one        [1][]byte // the value column's bytes when there is one column (the common case)
	}
	flags, exp, cas := &t.flags, &t.exp, &t.cas
	vals := t.one[:]
	if len(c.qVals) > 1 {
		vals = make([][]byte, len(c.qVals))
	}
	dest := make([]any, 0, 1+len(vals)+3)
	dest = append(dest, &key)
	for i := range vals {
		dest = append(dest, &vals[i])
	}
	if c.qFlags != "" {
		dest = append(dest, flags)
	}
	if c.qCAS != "" {
		dest = append(dest, cas)
	}
	if c.qExp != "" {
		dest = append(dest, exp)
	}
	if err := sc.Scan(dest...); err != nil {
		return "", Item{}, false, err
	}
	if len(vals) == 1 {
		it.Value = nonNil(vals[0])
	} else {
		it.Value = []byte(string(joinBytes(vals, c.sep)))
	}
	it.Flags = uint32(flags.Int64)
	it.Exptime = exp.Int64
	if c.qCAS != "" {
		it.CAS = cas.V
	} else {
		it.CAS = hashCAS(it.Value, it.Flags)
	}
	return key, it, !expired(it.Exptime, now()), nil
}

func joinBytes(parts [][]byte, sep string) []byte {
	var b []byte
	for i, p := range parts {
		if i > 0 {
			b = append(b, sep...)
		}
		b = append(b, p...)
	}
	return nonNil(b)
}

// Get reads key's row; expired rows are misses.
func (c *Container) Get(ctx context.Context, key []byte) (Item, bool, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return Item{}, false, err
		}
		return p.Get(ctx, key)
	}
	if err := c.checkKey(key); err != nil {
		return Item{}, false, err
	}
	c.reads.Add(1)
	db := c.reader()
	_, it, ok, err := c.scanItem(db.QueryRowContext(c.unwatched(ctx, ctx), c.stmt.get, key))
	if err != nil && !errors.Is(err, sql.ErrNoRows) && db != c.db && ctx.Err() == nil {
		// The replica failed: the primary has it all.
		_, it, ok, err = c.scanItem(c.db.QueryRowContext(c.unwatched(ctx, ctx), c.stmt.get, key))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return Item{}, false, nil
	}
	if err != nil {
		return Item{}, false, c.mapErr(err)
	}
	return it, ok, nil
}

// NormKey is how the key column compares keys, approximately: case folded
// for a _ci collation, trailing spaces ignored for a PAD SPACE one. Keys with
// the same NormKey address the same row.
func (c *Container) NormKey(k string) string {
	if c.sh != nil {
		if p := c.checkedPart(); p != nil {
			return p.normKey(k)
		}
		return k
	}
	return c.normKey(k)
}

// Until the table is checked the collation is not known and keys are taken
// as they are: nothing keyed by NormKey is stored then (every operation
// fails), except write-behind records replayed from the journal, which were
// keyed when the container was checked in an earlier run.
func (c *Container) normKey(k string) string {
	if !c.checked.Load() {
		return k
	}
	return c.normLive(k)
}

// normLive is the key rule of the checked table (the checked fields must be
// set: see OnLive).
func (c *Container) normLive(k string) string {
	if c.keyPad {
		k = strings.TrimRight(k, " ")
	}
	if c.keyFold {
		k = strings.ToLower(k)
	}
	return k
}

// AppendNormKey appends NormKey(key) to dst without converting key to a
// string (the engine builds a cache key with it on every cached read).
func (c *Container) AppendNormKey(dst, key []byte) []byte {
	if c.sh != nil {
		if p := c.checkedPart(); p != nil {
			return p.AppendNormKey(dst, key)
		}
		return append(dst, key...)
	}
	if !c.checked.Load() {
		return append(dst, key...)
	}
	if c.keyPad {
		key = bytes.TrimRight(key, " ")
	}
	if !c.keyFold {
		return append(dst, key...)
	}
	for _, b := range key {
		if b >= utf8.RuneSelf {
			return append(dst, c.normKey(string(key))...)
		}
	}
	for _, b := range key {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		dst = append(dst, b)
	}
	return dst
}

// GetMulti reads all keys with one `WHERE key IN (…)`. The result holds the
// live items, keyed by the requested key (a row matches every requested key
// its column's collation considers equal).
func (c *Container) GetMulti(ctx context.Context, keys [][]byte) (map[string]Item, error) {
	if c.sh != nil {
		return c.shardedGetMulti(ctx, keys)
	}
	out := map[string]Item{}
	want := map[string][]string{} // normalized → requested keys
	var args []any
	for _, k := range keys {
		if err := c.checkKey(k); err != nil {
			return nil, err
		}
		n := c.normKey(string(k))
		if _, dup := want[n]; !dup {
			args = append(args, k)
		}
		if !containsStr(want[n], string(k)) {
			want[n] = append(want[n], string(k))
		}
	}
	if len(args) == 0 {
		return out, nil
	}
	q := c.stmt.getIn + "?" + strings.Repeat(", ?", len(args)-1) + ")"
	c.reads.Add(1)
	db := c.reader()
	err := c.getMulti(ctx, db, q, args, want, out)
	if err != nil && db != c.db && ctx.Err() == nil {
		// The replica failed: the primary has it all.
		clear(out)
		err = c.getMulti(ctx, c.db, q, args, want, out)
	}
	if err != nil {
		return nil, c.mapErr(err)
	}
	return out, nil
}

// getMulti runs GetMulti's query q on db, adding what it finds to out.
func (c *Container) getMulti(ctx context.Context, db *sql.DB, q string, args []any, want map[string][]string, out map[string]Item) error {
	rows, err := db.QueryContext(c.unwatched(ctx, ctx), q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		k, it, ok, err := c.scanItem(rows)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		for _, req := range want[c.normKey(k)] {
			out[req] = it
		}
	}
	return rows.Err()
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// writeCols are the columns an item write sets, after the key: values, flags,
// cas, expiry (the optional ones when present); writeArgs gives their values.
func (c *Container) writeCols() []string {
	s := append([]string(nil), c.qVals...)
	for _, q := range []string{c.qFlags, c.qCAS, c.qExp} {
		if q != "" {
			s = append(s, q)
		}
	}
	return s
}

// writeArgs returns the values for writeCols and the item's CAS.
func (c *Container) writeArgs(it Item, cas uint64) ([]any, error) {
	return c.appendWriteArgs(make([]any, 0, c.writeWidth()), it, cas)
}

// writeWidth is how many values writeArgs gives: one per writeCols.
func (c *Container) writeWidth() int {
	n := len(c.qVals)
	for _, q := range []string{c.qFlags, c.qCAS, c.qExp} {
		if q != "" {
			n++
		}
	}
	return n
}

// appendWriteArgs appends writeArgs' values to dst. Flags go as int64, a type the driver takes as it is (a uint32
// it would convert, boxing the value a second time).
func (c *Container) appendWriteArgs(dst []any, it Item, cas uint64) ([]any, error) {
	if err := c.checkRowBytes(it); err != nil {
		return nil, err
	}
	dst, err := c.appendSplit(dst, it.Value)
	if err != nil {
		return nil, err
	}
	if err := c.checkFlagsExpiry(it); err != nil {
		return nil, err
	}
	if c.qFlags != "" {
		dst = append(dst, int64(it.Flags))
	}
	if c.qCAS != "" {
		dst = append(dst, cas)
	}
	if c.qExp != "" {
		dst = append(dst, it.Exptime)
	}
	return dst, nil
}

// checkWrite reports what appendWriteArgs would refuse it for, in the same order, without building the arguments
// (a value boxed for the driver is an allocation, and Check runs on every async set): a value of one column is only
// checked; one split over several columns is split as appendSplit splits it.
func (c *Container) checkWrite(it Item) error {
	if err := c.checkRowBytes(it); err != nil {
		return err
	}
	if len(c.qVals) == 1 {
		if err := c.valCols[0].checkBytes(it.Value); err != nil {
			return c.errorf("%w", err)
		}
	} else if _, err := c.appendSplit(nil, it.Value); err != nil {
		return err
	}
	return c.checkFlagsExpiry(it)
}

// checkFlagsExpiry reports whether it's flags and expiry fit their columns, where the container has them.
func (c *Container) checkFlagsExpiry(it Item) error {
	if c.qFlags != "" {
		if err := c.flagsFit.checkUint(uint64(it.Flags)); err != nil {
			return c.errorf("flags: %w", err)
		}
	}
	if c.qExp != "" {
		if err := c.expFit.checkInt(it.Exptime); err != nil {
			return c.errorf("expiry: %w", err)
		}
	}
	return nil
}

// SeenCAS tells the container of a CAS assigned earlier that the table does
// not hold yet (a write-behind journal replayed after a restart), so AssignCAS
// never hands it out again.
func (c *Container) SeenCAS(v uint64) {
	if c.qCAS != "" {
		c.cas.raise(v)
	}
}

// AssignCAS is the CAS an item written now gets: the next of the table's
// counter with a cas column, else the hash of its value and flags.
func (c *Container) AssignCAS(it Item) uint64 {
	if c.qCAS != "" {
		return c.cas.next()
	}
	return hashCAS(it.Value, it.Flags)
}

// assignments is "col = ?, …" for writeCols.
func assignments(cols []string) string {
	s := make([]string, len(cols))
	for i, col := range cols {
		s[i] = col + " = ?"
	}
	return strings.Join(s, ", ")
}

// existsLive reports whether key has a live row (used when an UPDATE changed
// nothing because the new values equal the old ones).
func (c *Container) existsLive(ctx context.Context, q queryer, key []byte) (bool, error) {
	cond, args := c.live()
	var one int
	err := q.QueryRowContext(ctx, "SELECT 1 FROM "+c.table+" WHERE "+c.qKey+" = ? AND "+cond, append([]any{key}, args...)...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Add stores it only when key has no live row: an expired row is deleted
// first, then a plain INSERT (a duplicate key is NotStored). INSERT IGNORE is
// not used because it would turn a too-long value into a silent truncation.
func (c *Container) Add(ctx context.Context, key []byte, it Item) (uint64, Status, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return 0, 0, err
		}
		return p.Add(ctx, key, it)
	}
	if err := c.checkKey(key); err != nil {
		return 0, 0, err
	}
	cas := c.AssignCAS(it)
	wargs, err := c.writeArgs(it, cas)
	if err != nil {
		return 0, 0, err
	}
	st := Stored
	err = c.onPrimary(ctx, func(db sqlConn) error {
		if c.qExp != "" {
			if _, err := db.ExecContext(ctx, "DELETE FROM "+c.table+" WHERE "+c.qKey+" = ? AND "+c.qExp+" <> 0 AND "+c.qExp+" <= ?", key, now()); err != nil {
				return c.mapErr(err)
			}
		}
		cols := c.writeCols()
		q := "INSERT INTO " + c.table + " (" + c.qKey + ", " + strings.Join(cols, ", ") + ") VALUES (?" + strings.Repeat(", ?", len(cols)) + ")"
		_, err := db.ExecContext(ctx, q, append([]any{key}, wargs...)...)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == mysqlwire.ERDupEntry {
			st = NotStored
			return nil
		}
		return c.writeErr(err)
	})
	if err != nil {
		return 0, 0, err
	}
	if st != Stored {
		return 0, st, nil
	}
	return cas, Stored, nil
}

// Replace stores it only when key has a live row: one UPDATE … WHERE.
func (c *Container) Replace(ctx context.Context, key []byte, it Item) (uint64, Status, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return 0, 0, err
		}
		return p.Replace(ctx, key, it)
	}
	if err := c.checkKey(key); err != nil {
		return 0, 0, err
	}
	cas := c.AssignCAS(it)
	wargs, err := c.writeArgs(it, cas)
	if err != nil {
		return 0, 0, err
	}
	cond, cargs := c.live()
	q := "UPDATE " + c.table + " SET " + assignments(c.writeCols()) + " WHERE " + c.qKey + " = ? AND " + cond
	var st Status
	err = c.onPrimary(ctx, func(db sqlConn) (err error) {
		st, err = c.updated(ctx, db, key, q, append(append(wargs, key), cargs...), Stored, NotStored)
		return err
	})
	if st != Stored || err != nil {
		cas = 0
	}
	return cas, st, err
}

// updated runs an UPDATE and answers yes when it matched a row, no otherwise.
// Zero affected rows with a live row present means the row already held the
// new values: still yes.
func (c *Container) updated(ctx context.Context, q queryer, key []byte, stmt string, args []any, yes, no Status) (Status, error) {
	res, err := q.ExecContext(ctx, stmt, args...)
	if err != nil {
		if _, inTx := q.(*sql.Tx); inTx {
			return 0, c.mapErr(err) // the transaction is lost with its connection: nothing of it applied
		}
		return 0, c.writeErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, c.mapErr(err)
	}
	if n > 0 {
		return yes, nil
	}
	ok, err := c.existsLive(ctx, q, key)
	if err != nil {
		return 0, c.mapErr(err)
	}
	if ok {
		return yes, nil
	}
	return no, nil
}

// Append adds it.Value after the value of a live row; like memcached, the
// row's flags and expiry are kept (it.Flags and it.Exptime are ignored).
func (c *Container) Append(ctx context.Context, key []byte, it Item) (uint64, Status, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return 0, 0, err
		}
		return p.Append(ctx, key, it)
	}
	return c.concat(ctx, key, it.Value, false)
}

// Prepend adds it.Value before the value of a live row (flags and expiry kept).
func (c *Container) Prepend(ctx context.Context, key []byte, it Item) (uint64, Status, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return 0, 0, err
		}
		return p.Prepend(ctx, key, it)
	}
	return c.concat(ctx, key, it.Value, true)
}

// concat is one UPDATE … SET v = CONCAT(…) with one value column; with
// several, the joined value changes, so it is read FOR UPDATE, changed and
// written back in one transaction.
func (c *Container) concat(ctx context.Context, key, data []byte, front bool) (uint64, Status, error) {
	if err := c.checkKey(key); err != nil {
		return 0, 0, err
	}
	if len(c.qVals) > 1 || c.qCAS == "" {
		// Several columns, or the CAS is a hash of the new value: read-modify-write.
		var cas uint64
		st, err := c.inTx(ctx, key, func(tx *sql.Tx, it Item, found bool) (Status, error) {
			if !found {
				return NotStored, nil
			}
			if front {
				it.Value = append(append([]byte{}, data...), it.Value...)
			} else {
				it.Value = append(it.Value, data...)
			}
			var err error
			cas, err = c.rewrite(ctx, tx, key, it)
			return Stored, err
		})
		if st != Stored {
			cas = 0
		}
		return cas, st, err
	}
	v := c.qVals[0]
	expr := "CONCAT(IFNULL(" + v + ", ''), ?)"
	if front {
		expr = "CONCAT(?, IFNULL(" + v + ", ''))"
	}
	cas := c.cas.next()
	cond, cargs := c.live()
	q := "UPDATE " + c.table + " SET " + v + " = " + expr + ", " + c.qCAS + " = ? WHERE " + c.qKey + " = ? AND " + cond
	var st Status
	err := c.onPrimary(ctx, func(db sqlConn) (err error) {
		st, err = c.updated(ctx, db, key, q, append([]any{nonNil(data), cas, key}, cargs...), Stored, NotStored)
		return err
	})
	if st != Stored || err != nil {
		cas = 0
	}
	return cas, st, err
}

// inTx runs fn on key's row read with SELECT … FOR UPDATE (found false when
// missing or expired) in a transaction, committed when fn returns no error.
func (c *Container) inTx(ctx context.Context, key []byte, fn func(tx *sql.Tx, it Item, found bool) (Status, error)) (st Status, err error) {
	err = c.onPrimary(ctx, func(db sqlConn) (err error) {
		st, err = c.inTxOn(ctx, db, key, fn)
		return err
	})
	if err != nil {
		return 0, err
	}
	return st, nil
}

// inTxOn is inTx on db.
func (c *Container) inTxOn(ctx context.Context, db sqlConn, key []byte, fn func(tx *sql.Tx, it Item, found bool) (Status, error)) (Status, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, c.mapErr(err)
	}
	defer tx.Rollback()
	row := tx.QueryRowContext(ctx, "SELECT "+c.selectList()+" FROM "+c.table+" WHERE "+c.qKey+" = ? FOR UPDATE", key)
	_, it, found, err := c.scanItem(row)
	if errors.Is(err, sql.ErrNoRows) {
		err, found = nil, false
	}
	if err != nil {
		return 0, c.mapErr(err)
	}
	st, err := fn(tx, it, found)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, c.writeErr(err) // a COMMIT cut off may have been applied
	}
	return st, nil
}

// rewrite writes it over key's existing row inside tx and returns its CAS.
func (c *Container) rewrite(ctx context.Context, tx *sql.Tx, key []byte, it Item) (uint64, error) {
	cas := c.AssignCAS(it)
	wargs, err := c.writeArgs(it, cas)
	if err != nil {
		return 0, err
	}
	q := "UPDATE " + c.table + " SET " + assignments(c.writeCols()) + " WHERE " + c.qKey + " = ?"
	if _, err := tx.ExecContext(ctx, q, append(wargs, key)...); err != nil {
		return 0, c.mapErr(err)
	}
	return cas, nil
}

// CompareAndSwap stores it only when key's live row still has CAS cas:
// Exists when it changed, NotFound when it is missing. With a cas column it
// is one `UPDATE … WHERE cas_col = ?`; without one, a transaction compares
// the hash of the row read FOR UPDATE.
func (c *Container) CompareAndSwap(ctx context.Context, key []byte, it Item, cas uint64) (uint64, Status, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return 0, 0, err
		}
		return p.CompareAndSwap(ctx, key, it, cas)
	}
	if err := c.checkKey(key); err != nil {
		return 0, 0, err
	}
	if c.qCAS == "" {
		var newCAS uint64
		st, err := c.inTx(ctx, key, func(tx *sql.Tx, old Item, found bool) (Status, error) {
			if !found {
				return NotFound, nil
			}
			if old.CAS != cas {
				return Exists, nil
			}
			var err error
			newCAS, err = c.rewrite(ctx, tx, key, it)
			return Stored, err
		})
		if st != Stored {
			newCAS = 0
		}
		return newCAS, st, err
	}
	newCAS := c.cas.next()
	wargs, err := c.writeArgs(it, newCAS)
	if err != nil {
		return 0, 0, err
	}
	cond, cargs := c.live()
	q := "UPDATE " + c.table + " SET " + assignments(c.writeCols()) + " WHERE " + c.qKey + " = ? AND " + c.qCAS + " = ? AND " + cond
	var st Status
	err = c.onPrimary(ctx, func(db sqlConn) error {
		res, err := db.ExecContext(ctx, q, append(append(wargs, key, cas), cargs...)...)
		if err != nil {
			return c.writeErr(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return c.mapErr(err)
		} else if n > 0 {
			st = Stored // the cas column always changes, so a match is always a change
			return nil
		}
		ok, err := c.existsLive(ctx, db, key)
		if err != nil {
			return c.mapErr(err)
		}
		st = NotFound
		if ok {
			st = Exists
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if st != Stored {
		return 0, st, nil
	}
	return newCAS, Stored, nil
}

// IncrDecr adds delta to (or, with decr, subtracts it from) the decimal
// value of key's live row in a transaction with SELECT … FOR UPDATE: incr
// wraps at 2^64, decr stops at 0; a value that is not a decimal uint64 is
// NonNumeric. Flags and expiry are kept. With several value columns the
// joined value is the number.
func (c *Container) IncrDecr(ctx context.Context, key []byte, delta uint64, decr bool) (uint64, Status, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return 0, 0, err
		}
		return p.IncrDecr(ctx, key, delta, decr)
	}
	if err := c.checkKey(key); err != nil {
		return 0, 0, err
	}
	var result uint64
	st, err := c.inTx(ctx, key, func(tx *sql.Tx, it Item, found bool) (Status, error) {
		if !found {
			return NotFound, nil
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(it.Value)), 10, 64)
		if err != nil {
			return NonNumeric, nil
		}
		switch {
		case !decr:
			n += delta // wraps
		case delta > n:
			n = 0
		default:
			n -= delta
		}
		it.Value = strconv.AppendUint(nil, n, 10)
		result = n
		if _, err := c.rewrite(ctx, tx, key, it); err != nil {
			return 0, err
		}
		return Stored, nil
	})
	if st != Stored {
		result = 0
	}
	return result, st, err
}

// Touch sets the expiry of key's live row: Touched or NotFound. Without an
// expiry column it only reports whether the row exists.
func (c *Container) Touch(ctx context.Context, key []byte, exptime int64) (Status, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return 0, err
		}
		return p.Touch(ctx, key, exptime)
	}
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	if c.qExp == "" {
		ok, err := c.existsLive(ctx, c.db, key)
		if err != nil {
			return 0, c.mapErr(err)
		}
		if ok {
			return Touched, nil
		}
		return NotFound, nil
	}
	cond, cargs := c.live()
	q := "UPDATE " + c.table + " SET " + c.qExp + " = ? WHERE " + c.qKey + " = ? AND " + cond
	var st Status
	err := c.onPrimary(ctx, func(db sqlConn) (err error) {
		st, err = c.updated(ctx, db, key, q, append([]any{exptime, key}, cargs...), Touched, NotFound)
		return err
	})
	if err != nil {
		return 0, err
	}
	return st, nil
}

// Delete removes key's row: Deleted, or NotFound when it was missing or
// expired (an expired row is removed too).
func (c *Container) Delete(ctx context.Context, key []byte) (Status, error) {
	if c.sh != nil {
		p, err := c.PartFor(ctx, key)
		if err != nil {
			return 0, err
		}
		return p.Delete(ctx, key)
	}
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	var res sql.Result
	var err error
	if c.qExp == "" {
		err = c.onPrimary(ctx, func(db sqlConn) (err error) {
			res, err = db.ExecContext(ctx, c.stmt.delete, key)
			return c.writeErr(err)
		})
		if err != nil {
			return 0, err
		}
	} else {
		// The row is read FOR UPDATE to learn whether it was live (DELETE …
		// RETURNING would be MariaDB-only), then deleted, expired or not, in
		// the same transaction.
		var st Status
		st, err = c.inTx(ctx, key, func(tx *sql.Tx, _ Item, found bool) (Status, error) {
			if _, err := tx.ExecContext(ctx, c.stmt.delete, key); err != nil {
				return 0, c.mapErr(err)
			}
			if found {
				return Deleted, nil
			}
			return NotFound, nil
		})
		return st, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, c.mapErr(err)
	}
	if n > 0 {
		return Deleted, nil
	}
	return NotFound, nil
}

// Truncate empties the table (TRUNCATE TABLE). Queued Sets are not affected:
// they may land after it.
func (c *Container) Truncate(ctx context.Context) error {
	if c.sh != nil {
		return c.shardedTruncate(ctx)
	}
	if err := c.notLive(); err != nil {
		return err
	}
	return c.onPrimary(ctx, func(db sqlConn) error {
		_, err := db.ExecContext(ctx, "TRUNCATE TABLE "+c.table)
		return c.mapErr(err)
	})
}

// Server error numbers that refuse a row's data: sending the same row again
// cannot succeed. Everything else (connections, lock waits, deadlocks,
// read-only servers, privileges) may pass.
var dataErrors = map[uint16]bool{
	mysqlwire.ERBadNull:                     true, // column cannot be null
	mysqlwire.ERDupEntry:                    true, // duplicate entry (on another unique index)
	mysqlwire.ERWarnDataOutOfRange:          true, // out of range value
	mysqlwire.ERDataTruncated:               true, // data truncated
	mysqlwire.ERTruncatedWrongValue:         true, // incorrect value
	mysqlwire.ERTruncatedWrongValueForField: true, // incorrect string value
	mysqlwire.ERDataTooLong:                 true, // data too long
	mysqlwire.ERRowIsReferenced:             true, // foreign key: row is referenced
	mysqlwire.ERNoReferencedRow:             true, // foreign key: parent row missing
}

// Refused reports whether err means the row itself cannot be written (keyway's
// own checks or the server refusing its data), so retrying the same row is
// pointless. A write-behind queue drops such a row; any other error is retried.
func Refused(err error) bool {
	if errors.Is(err, ErrKeyTooLong) || errors.Is(err, ErrValueTooLong) || errors.Is(err, ErrValueType) || errors.Is(err, ErrTooManyValues) {
		return true
	}
	return dataError(err)
}

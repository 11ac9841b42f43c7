package container

// Replicas: a container on a group that reads replicas (backend.Group.ReadsReplicas; Options.Replicas) keeps the
// promise the SQL door keeps (see package sqlproxy, replicas.go, and docs/replicas.md): a write acknowledged through
// keyway is seen by every later read through keyway, whichever door made it and whichever server answers.
//
// Writes run on the primary. Each write the container acknowledges notes its GTID on the group's validity.Gate
// (NoteCommit, for the container's table) before it returns: go-sql-driver exposes no session tracking, so the
// write runs on one connection of the pool held for it (sql.Conn), and once it committed that connection is asked
// SELECT @@last_gtid, the GTID of the last transaction the session committed (MariaDB). A group commit batch, a
// write-behind round and a transaction of several statements read it once, after their last commit: the GTIDs of
// one connection only grow. That costs one round trip per write (figures in docs/replicas.md). If the connection
// cannot answer, the primary's @@gtid_binlog_pos, read on any connection, stands in (it is at or after every
// commit the primary made); if neither can be read the write fails (it may have committed: the client hears an
// error, never a promise keyway could not keep). A group that does not read replicas pays nothing: its writes run
// on the pool as before and note nothing (the binlog follower notes their positions when it reads them, which is
// all a group without replica reads needs).
//
// Reads (Get, GetMulti: a db_only get, a caching miss's fill, a multi-get's rows) run on
// backend.Group.ReadMember(gate.Needs(table)): a replica whose applied position covers every commit to the table
// keyway knows of, else the primary. The Needs is read when the read is sent, after the caller's validity stamp
// (package rowcache takes the stamp, then asks the write-behind queue, then calls Get): so a fill reads at or
// after the position its stamp stands for (package validity, "The fill rule with replicas"). A read that fails on
// a replica runs again on the primary, once. Each member a read went to gets a database/sql pool of its own
// (OpenDB on the member's SQLConfig), opened on first use and shared by the group's containers; Replicas.Close
// closes them.

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/validity"
)

// erUnknownSystemVariable is MySQL's answer to @@last_gtid and @@gtid_binlog_pos (MariaDB's variables).
const erUnknownSystemVariable = 1193

// positionTimeout bounds the read of a write's position (SELECT @@last_gtid, or the primary's binlog position) on a
// pool without a PoolDeadline.
const positionTimeout = 2 * time.Second

// Replicas is what the containers of one backend group share to read its replicas and note their writes'
// positions: the group, its validity gate and a pool per member reads went to. Make one per group with
// NewReplicas and pass it as Options.Replicas to each container of the group; Close it after them.
type Replicas struct {
	group *backend.Group
	gate  *validity.Gate

	mu     sync.Mutex
	dbs    map[*backend.Group]*sql.DB
	closed bool
}

// NewReplicas is the replicas of group g, whose positions gate keeps (validity.Registry.Gate of g's name).
func NewReplicas(g *backend.Group, gate *validity.Gate) *Replicas {
	return &Replicas{group: g, gate: gate, dbs: map[*backend.Group]*sql.DB{}}
}

// active reports whether reads may go to replicas (and writes must note their positions).
func (r *Replicas) active() bool { return r != nil && r.gate != nil && r.group.ReadsReplicas() }

// db is member m's pool, opened on first use; nil once closed.
func (r *Replicas) db(m *backend.Group) *sql.DB {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	db := r.dbs[m]
	if db == nil {
		db = OpenDB(m.SQLConfig())
		r.dbs[m] = db
	}
	return db
}

// Close closes the members' pools; reads after it run on the primary.
func (r *Replicas) Close() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	var errs []error
	for _, db := range r.dbs {
		errs = append(errs, db.Close())
	}
	clear(r.dbs)
	return errors.Join(errs...)
}

// sqlConn is what a write runs on: the primary's pool, or one connection of it (see writer).
type sqlConn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// reader is the pool a read of the table runs on now: a replica's that covers every commit to the table keyway
// knows of, or the primary's.
func (c *Container) reader() *sql.DB {
	r := c.opt.Replicas
	if !r.active() {
		return c.db
	}
	m := r.group.ReadMember(r.gate.Needs(c.ids[:]))
	if m == r.group {
		return c.db
	}
	if db := r.db(m); db != nil {
		return db
	}
	return c.db
}

// writer is what a write runs on, and finish, which the caller must call once the write ended (wrote: it
// succeeded, so keyway will acknowledge it): on a group that reads replicas, one connection of the pool, whose
// position finish notes (see the comment at the top) before it releases it; else the pool, and finish does
// nothing. finish's error, when wrote, is the write's: its position could not be learned.
func (c *Container) writer(ctx context.Context) (q sqlConn, finish func(wrote bool) error, err error) {
	if !c.opt.Replicas.active() {
		return c.db, func(bool) error { return nil }, nil
	}
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	return conn, func(wrote bool) error {
		defer conn.Close()
		if !wrote {
			return nil
		}
		return c.notePosition(ctx, conn)
	}, nil
}

// onPrimary runs write on the primary (see writer) and returns its error, or, when it succeeded, finish's.
func (c *Container) onPrimary(ctx context.Context, write func(q sqlConn) error) error {
	q, finish, err := c.writer(ctx)
	if err != nil {
		return c.mapErr(err)
	}
	werr := write(q)
	if ferr := finish(werr == nil); werr == nil {
		return ferr
	}
	return werr
}

// notePosition notes, for the container's table, the GTID of the last transaction conn committed (or, when conn
// cannot say, the primary's binlog position), before the write is acknowledged.
func (c *Container) notePosition(ctx context.Context, conn *sql.Conn) error {
	// Not the write's context: the write committed, whatever happened to its callers since. On a pool that ends a
	// silent statement itself (PoolDeadline) without a Done channel, as unwatched says why.
	ctx = context.WithoutCancel(ctx)
	if c.opt.PoolDeadline <= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, positionTimeout)
		defer cancel()
	}
	var s string
	err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&s)
	if err != nil {
		if err2 := c.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&s); err2 != nil {
			var me *mysql.MySQLError
			if errors.As(err2, &me) && me.Number == erUnknownSystemVariable {
				return nil // not MariaDB: no GTID positions (validity: a MySQL group's positions stay zero)
			}
			return c.errorf("the write's position on the primary could not be read, so a replica could not be told from one that has it (the write may have committed): %w", errors.Join(err, err2))
		}
	}
	pos, err := validity.ParsePosition(s)
	if err != nil {
		return c.errorf("the write's position: %w", err)
	}
	c.opt.Replicas.gate.NoteCommit(c.ids[:], pos)
	return nil
}

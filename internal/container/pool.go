package container

import (
	"context"
	"database/sql"
	"time"

	"github.com/go-sql-driver/mysql"
)

// StatementTimeout is how long an OpenDB pool waits for the server's next packet, or to send one, before it fails
// the statement (go-sql-driver's readTimeout and writeTimeout: net deadlines, no goroutine). Pass it as
// Options.PoolDeadline to containers on such a pool.
const StatementTimeout = 8 * time.Second

// OpenDB is the database/sql pool containers of one backend group share, built on cfg: the group's go-sql-driver
// configuration (backend.Group.SQLConfig), which decides where to dial and with which account. OpenDB adds what
// containers rely on: strict sql_mode (a value too long is an error, never truncated) and client-side
// interpolation (statements are built per batch size; a server-side prepare would cost a prepare/execute/close
// round trip each time), and StatementTimeout. The caller closes the pool.
func OpenDB(cfg *mysql.Config) *sql.DB {
	dc := cfg.Clone()
	dc.Params = map[string]string{"sql_mode": "'STRICT_ALL_TABLES'"}
	dc.InterpolateParams = true
	dc.ReadTimeout, dc.WriteTimeout = StatementTimeout, StatementTimeout
	connector, _ := mysql.NewConnector(dc) // fails only on a config that cannot be, such as a TLS name not registered
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(poolConns)
	db.SetMaxIdleConns(poolConns)
	return db
}

// poolConns is the most connections an OpenDB pool opens, and keeps idle.
const poolConns = 64

// DropIdle closes db's idle connections (an OpenDB pool): after its group followed a new primary, so that no
// later statement goes to the former one. Connections in use finish where they are.
func DropIdle(db *sql.DB) {
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(poolConns)
}

// unwatched is the context to run a statement under for a caller whose context is caller: ctx itself, or, when the
// pool ends a silent statement (Options.PoolDeadline) before caller's deadline would, ctx without its Done channel.
// go-sql-driver hands a cancellable context to a watcher goroutine and waits for that goroutine again when the
// statement ends, and database/sql starts a goroutine per query to watch it: goroutine hand-offs that weigh the more
// the less MariaDB has to do (BenchmarkDirectReplaceWatched against BenchmarkDirectReplace; figures in
// docs/benchmarks.md). An explicit cancel of caller is then not seen until the statement ends; keyway's callers
// only cancel after it has.
func (c *Container) unwatched(caller, ctx context.Context) context.Context {
	if c.opt.PoolDeadline <= 0 {
		return ctx
	}
	if dl, ok := caller.Deadline(); ok && time.Until(dl) >= c.opt.PoolDeadline {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

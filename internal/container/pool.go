package container

import (
	"database/sql"

	"github.com/go-sql-driver/mysql"
)

// OpenDB is the database/sql pool containers of one backend group share, built on cfg: the group's go-sql-driver
// configuration (backend.Group.SQLConfig), which decides where to dial and with which account. OpenDB adds what
// containers rely on: strict sql_mode (a value too long is an error, never truncated) and client-side
// interpolation (statements are built per batch size; a server-side prepare would cost a prepare/execute/close
// round trip each time). The caller closes the pool.
func OpenDB(cfg *mysql.Config) *sql.DB {
	dc := cfg.Clone()
	dc.Params = map[string]string{"sql_mode": "'STRICT_ALL_TABLES'"}
	dc.InterpolateParams = true
	connector, _ := mysql.NewConnector(dc) // fails only on a config that cannot be, such as a TLS name not registered
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	return db
}

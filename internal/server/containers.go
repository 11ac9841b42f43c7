package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/engine"
)

// openTables opens every configured container on its group's primary,
// checking each against the real table, and returns them bound to their
// policies. The *sql.DB pools are returned for closing.
func openTables(ctx context.Context, cfg config.Config) ([]*engine.Table, []*sql.DB, error) {
	// Refuse what the config accepts but keyway cannot do yet, rather than
	// silently doing something else.
	if cfg.Migrate.InnodbMemcache != "" {
		return nil, nil, fmt.Errorf("migrate.innodb_memcache: importing an innodb_memcache schema is not implemented yet; declare [[containers]] instead")
	}
	for i, c := range cfg.Containers {
		if c.Write == config.WriteAsync {
			return nil, nil, fmt.Errorf("containers[%d].write = \"async\" (container %q): write-behind is not implemented yet; use \"sync\"", i, c.Name)
		}
	}
	if len(cfg.Containers) == 0 {
		return nil, nil, nil
	}
	groups := map[string]config.Group{}
	for _, g := range cfg.Groups {
		groups[g.Name] = g
	}
	dbs := map[string]*sql.DB{}
	var tables []*engine.Table
	closeAll := func() {
		for _, db := range dbs {
			db.Close()
		}
	}
	for _, c := range cfg.Containers {
		g, ok := groups[c.Group]
		if !ok {
			closeAll()
			return nil, nil, fmt.Errorf("container %q: group %q is not in [[groups]]", c.Name, c.Group)
		}
		db := dbs[g.Name]
		if db == nil {
			db = openGroupDB(g)
			dbs[g.Name] = db
		}
		schema, table, _ := strings.Cut(c.Table, ".")
		ct, err := container.Open(ctx, db, container.Def{
			Name: c.Name, Schema: schema, Table: table, KeyColumn: c.Key, ValueColumns: c.Values,
			Separator: c.Separator, FlagsColumn: c.Flags, CASColumn: c.CAS, ExpiryColumn: c.Expiry,
		}, container.Options{})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("container %q on group %s (%s): %w", c.Name, g.Name, g.Primary, err)
		}
		tables = append(tables, &engine.Table{Name: c.Name, Source: strings.ToLower(c.Table), C: ct, Get: c.Get, Set: c.Set, Delete: c.Delete, Flush: c.Flush})
	}
	var pools []*sql.DB
	for _, db := range dbs {
		pools = append(pools, db)
	}
	return tables, pools, nil
}

// openGroupDB is a database/sql pool on a group's primary with keyway's own
// account (the group's user and password).
func openGroupDB(g config.Group) *sql.DB {
	dc := mysql.NewConfig()
	dc.User, dc.Passwd = g.User, g.Password
	if strings.HasPrefix(g.Primary, "/") {
		dc.Net, dc.Addr = "unix", g.Primary
	} else {
		dc.Net, dc.Addr = "tcp", g.Primary
	}
	dc.Timeout = g.ConnectTimeout
	if dc.Timeout == 0 {
		dc.Timeout = 5 * time.Second
	}
	dc.Params = map[string]string{"sql_mode": "'STRICT_ALL_TABLES'"}
	// Statements are built per batch size; interpolating saves the
	// prepare/execute/close round trips a server-side prepare costs each time.
	dc.InterpolateParams = true
	connector, _ := mysql.NewConnector(dc) // only fails on a bad config struct, which this is not
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	return db
}

// closeTables stops the containers' group committers (answering queued
// writes) and closes their pools.
func closeTables(tables []*engine.Table, dbs []*sql.DB) error {
	var errs []error
	for _, t := range tables {
		if err := t.C.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, db := range dbs {
		db.Close()
	}
	return errors.Join(errs...)
}

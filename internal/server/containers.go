package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/writebehind"
)

// openTables opens every configured container (and, with [migrate]
// innodb_memcache, every container of that group's plugin schema) on its
// group's primary, checking each against the real table, and returns them
// bound to their policies with the *sql.DB pools to close later. On an error
// nothing stays open.
func openTables(ctx context.Context, cfg config.Config, eng *engine.Engine, log *slog.Logger) (_ []*engine.Table, _ []*sql.DB, err error) {
	dbs := map[string]*sql.DB{}
	var opened []*engine.Table
	defer func() {
		if err != nil {
			closeTables(opened, nil)
			for _, db := range dbs {
				db.Close()
			}
		}
	}()
	groups := map[string]config.Group{}
	for _, g := range cfg.Groups {
		groups[g.Name] = g
	}
	dbFor := func(g config.Group) *sql.DB {
		if dbs[g.Name] == nil {
			dbs[g.Name] = openGroupDB(g)
		}
		return dbs[g.Name]
	}
	containers := cfg.Containers
	if name := cfg.Migrate.InnodbMemcache; name != "" {
		imported, err := importInnodbMemcache(ctx, dbFor(groups[name]), groups[name])
		if err != nil {
			return nil, nil, fmt.Errorf("migrate.innodb_memcache = %q: %w", name, err)
		}
		containers = append(imported, containers...)
	}
	seen := map[string]bool{}
	for _, c := range containers {
		if seen[c.Name] {
			return nil, nil, fmt.Errorf("container %q is defined twice (in [[containers]] and the innodb_memcache schema?)", c.Name)
		}
		seen[c.Name] = true
	}
	for _, c := range containers {
		g, ok := groups[c.Group]
		if !ok {
			return nil, nil, fmt.Errorf("container %q: group %q is not in [[groups]]", c.Name, c.Group)
		}
		schema, table, _ := strings.Cut(c.Table, ".")
		ct, err := container.Open(ctx, dbFor(g), container.Def{
			Name: c.Name, Schema: schema, Table: table, KeyColumn: c.Key, ValueColumns: c.Values,
			Separator: c.Separator, FlagsColumn: c.Flags, CASColumn: c.CAS, ExpiryColumn: c.Expiry,
		}, container.Options{})
		if err != nil {
			return nil, nil, fmt.Errorf("container %q on group %s (%s): %w", c.Name, g.Name, g.Primary, err)
		}
		t := &engine.Table{Name: c.Name, Source: strings.ToLower(c.Table), C: ct,
			Get: c.Get, Set: c.Set, Delete: c.Delete, Flush: c.Flush}
		if c.Write == config.WriteAsync {
			if !eng.Store().Persistent() {
				log.Warn("container writes behind without a persistent store: sets acknowledged but not yet in the table are lost if keyway dies (set [store] data_dir and durability)", "container", c.Name)
			}
			t.Behind = writebehind.New(ct, eng.Store(), "@@"+c.Name+".", writebehind.Options{
				Window: c.WriteWindow, MaxPending: c.WriteMaxPending, Logger: log,
				OnDrop: func(row []byte) { eng.DroppedWrite(t, row) },
			})
		}
		opened = append(opened, t)
	}
	var pools []*sql.DB
	for _, db := range dbs {
		pools = append(pools, db)
	}
	return opened, pools, nil
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

// closeTables stops the containers' write-behind queues (writing what they
// can; the rest stays in the store's journal) and group committers (answering
// queued writes), and closes their pools.
func closeTables(tables []*engine.Table, dbs []*sql.DB) error {
	var errs []error
	for _, t := range tables {
		if t.Behind != nil {
			// Before the container: the queue's last writes go through it.
			if err := t.Behind.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := t.C.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, db := range dbs {
		db.Close()
	}
	return errors.Join(errs...)
}

// plugin policy names → keyway's; the plugin says innodb_only for db_only.
var pluginPolicies = map[string]string{
	"innodb_only": config.PolicyDBOnly,
	"cache_only":  config.PolicyCacheOnly,
	"caching":     config.PolicyCaching,
	"disabled":    config.PolicyDisabled,
}

// importInnodbMemcache reads the InnoDB memcached plugin's configuration
// schema (innodb_memcache.containers, cache_policies, config_options) from
// group g and returns its containers, so a site coming from MySQL 5.7/8.0
// keeps its configuration. Rows are read with their plugin meaning: value
// columns separated by ',', ';', '|' or spaces, and the plugin's default
// policy (innodb_only) when cache_policies has no row.
func importInnodbMemcache(ctx context.Context, db *sql.DB, g config.Group) ([]config.Container, error) {
	sep := "|"
	if err := db.QueryRowContext(ctx, "SELECT value FROM innodb_memcache.config_options WHERE name = 'separator'").Scan(&sep); err != nil && err != sql.ErrNoRows {
		return nil, fmt.Errorf("innodb_memcache.config_options: %w", err)
	}
	policy := map[string]string{"get": config.PolicyDBOnly, "set": config.PolicyDBOnly, "delete": config.PolicyDBOnly, "flush": config.PolicyDBOnly}
	var get, set, del, flush string
	err := db.QueryRowContext(ctx, "SELECT get_policy, set_policy, delete_policy, flush_policy FROM innodb_memcache.cache_policies LIMIT 1").Scan(&get, &set, &del, &flush)
	switch {
	case err == sql.ErrNoRows:
	case err != nil:
		return nil, fmt.Errorf("innodb_memcache.cache_policies: %w", err)
	default:
		for op, p := range map[string]string{"get": get, "set": set, "delete": del, "flush": flush} {
			k, ok := pluginPolicies[p]
			if !ok {
				return nil, fmt.Errorf("innodb_memcache.cache_policies: %s_policy %q is not one of innodb_only, cache_only, caching, disabled", op, p)
			}
			policy[op] = k
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT name, db_schema, db_table, key_columns, value_columns,
		COALESCE(flags, ''), COALESCE(cas_column, ''), COALESCE(expire_time_column, '') FROM innodb_memcache.containers`)
	if err != nil {
		return nil, fmt.Errorf("innodb_memcache.containers: %w", err)
	}
	defer rows.Close()
	var out []config.Container
	for rows.Next() {
		var c config.Container
		var schema, table, values string
		if err := rows.Scan(&c.Name, &schema, &table, &c.Key, &values, &c.Flags, &c.CAS, &c.Expiry); err != nil {
			return nil, fmt.Errorf("innodb_memcache.containers: %w", err)
		}
		c.Group, c.Table, c.Separator, c.Write = g.Name, schema+"."+table, sep, config.WriteSync
		c.Values = strings.FieldsFunc(values, func(r rune) bool { return r == ',' || r == ';' || r == '|' || r == ' ' })
		c.Get, c.Set, c.Delete, c.Flush = policy["get"], policy["set"], policy["delete"], policy["flush"]
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("innodb_memcache.containers: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("innodb_memcache.containers on group %s is empty", g.Name)
	}
	return out, nil
}

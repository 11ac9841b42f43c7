package container

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Imported is one container read from an InnoDB memcached plugin schema, with the schema's policies.
type Imported struct {
	Def      Def
	Policies Policies
}

// pluginPolicies maps the plugin's policy names to keyway's; the plugin says innodb_only for db_only.
var pluginPolicies = map[string]Policy{
	"innodb_only": DBOnly,
	"cache_only":  CacheOnly,
	"caching":     Caching,
	"disabled":    Disabled,
}

// ImportInnodbMemcache reads the InnoDB memcached plugin's configuration schema (innodb_memcache.containers,
// cache_policies, config_options) through db and returns its containers, so a site coming from MySQL 5.7/8.0 keeps
// its configuration. Rows are read with their plugin meaning: value columns separated by ',', ';', '|' or spaces,
// and the plugin's default policy (innodb_only) when cache_policies has no row. Imported containers write
// synchronously, as the plugin did outside its batch mode.
func ImportInnodbMemcache(ctx context.Context, db *sql.DB) ([]Imported, error) {
	sep := "|"
	if err := db.QueryRowContext(ctx, "SELECT value FROM innodb_memcache.config_options WHERE name = 'separator'").Scan(&sep); err != nil && err != sql.ErrNoRows {
		return nil, fmt.Errorf("innodb_memcache.config_options: %w", err)
	}
	policies := Policies{Get: DBOnly, Set: DBOnly, Delete: DBOnly, Flush: DBOnly}
	var names [4]string
	err := db.QueryRowContext(ctx, "SELECT get_policy, set_policy, delete_policy, flush_policy FROM innodb_memcache.cache_policies LIMIT 1").
		Scan(&names[0], &names[1], &names[2], &names[3])
	switch {
	case err == sql.ErrNoRows:
	case err != nil:
		return nil, fmt.Errorf("innodb_memcache.cache_policies: %w", err)
	default:
		dst := [4]*Policy{&policies.Get, &policies.Set, &policies.Delete, &policies.Flush}
		for i, op := range [4]string{"get", "set", "delete", "flush"} {
			p, ok := pluginPolicies[names[i]]
			if !ok {
				return nil, fmt.Errorf("innodb_memcache.cache_policies: %s_policy %q is not one of innodb_only, cache_only, caching, disabled", op, names[i])
			}
			*dst[i] = p
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT name, db_schema, db_table, key_columns, value_columns,
		COALESCE(flags, ''), COALESCE(cas_column, ''), COALESCE(expire_time_column, '') FROM innodb_memcache.containers`)
	if err != nil {
		return nil, fmt.Errorf("innodb_memcache.containers: %w", err)
	}
	defer rows.Close()
	var out []Imported
	for rows.Next() {
		var d Def
		var values string
		if err := rows.Scan(&d.Name, &d.Schema, &d.Table, &d.KeyColumn, &values, &d.FlagsColumn, &d.CASColumn, &d.ExpiryColumn); err != nil {
			return nil, fmt.Errorf("innodb_memcache.containers: %w", err)
		}
		d.Separator = sep
		d.ValueColumns = strings.FieldsFunc(values, func(r rune) bool { return r == ',' || r == ';' || r == '|' || r == ' ' })
		out = append(out, Imported{Def: d, Policies: policies})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("innodb_memcache.containers: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("innodb_memcache.containers is empty")
	}
	return out, nil
}

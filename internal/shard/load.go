package shard

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DefaultSchema is the schema on the global group that holds the shard map when [sharding] source = "table".
const DefaultSchema = "keyway_shards"

// The keyway_shards tables. An operator edits them with SQL, in one transaction that also bumps
// map_version.version; keyway reloads the map when the binlog shows a change to the schema. CreateSchemaSQL returns
// the statements that create them.
//
//	map_version  one row (id = 1): the map's version, which must grow with every change
//	mappings     name, kind ('hash', 'xxhash', 'range_int', 'range_string')
//	shards       mapping, name, group_name, range_from, range_to (NULL = open; hash shards: NULL, the name is the range)
//	tables       schema_name ('' = any schema), table_name, mapping, column_name, scatter
var schemaTables = []string{
	"CREATE TABLE IF NOT EXISTS %s.map_version (\n" +
		"  id TINYINT UNSIGNED NOT NULL PRIMARY KEY DEFAULT 1 CHECK (id = 1),\n" +
		"  version BIGINT UNSIGNED NOT NULL\n" +
		") ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS %s.mappings (\n" +
		"  name VARCHAR(64) NOT NULL PRIMARY KEY,\n" +
		"  kind VARCHAR(16) NOT NULL\n" +
		") ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS %s.shards (\n" +
		"  mapping VARCHAR(64) NOT NULL,\n" +
		"  name VARCHAR(64) NOT NULL,\n" +
		"  group_name VARCHAR(64) NOT NULL,\n" +
		"  range_from VARBINARY(255) NULL,\n" +
		"  range_to VARBINARY(255) NULL,\n" +
		"  PRIMARY KEY (mapping, name),\n" +
		"  FOREIGN KEY (mapping) REFERENCES mappings (name)\n" +
		") ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS %s.tables (\n" +
		"  schema_name VARCHAR(64) NOT NULL DEFAULT '',\n" +
		"  table_name VARCHAR(64) NOT NULL,\n" +
		"  mapping VARCHAR(64) NOT NULL,\n" +
		"  column_name VARCHAR(64) NOT NULL,\n" +
		"  scatter BOOLEAN NOT NULL DEFAULT FALSE,\n" +
		"  PRIMARY KEY (schema_name, table_name),\n" +
		"  FOREIGN KEY (mapping) REFERENCES mappings (name)\n" +
		") ENGINE=InnoDB",
}

// CreateSchemaSQL returns the statements that create schema (DefaultSchema if "") and its tables, each
// "IF NOT EXISTS". They create no rows: the operator inserts map_version's row with the map.
func CreateSchemaSQL(schema string) []string {
	q := quoteIdent(schemaOrDefault(schema))
	out := []string{"CREATE DATABASE IF NOT EXISTS " + q}
	for _, t := range schemaTables {
		out = append(out, fmt.Sprintf(t, q))
	}
	return out
}

func schemaOrDefault(s string) string {
	if s == "" {
		return DefaultSchema
	}
	return s
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// Querier runs a query: *sql.DB, *sql.Conn and *sql.Tx are all one.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// loadQuery reads the four tables in one statement, so that InnoDB answers them all from one read view: a map
// edited in one transaction is seen before or after that transaction, never half-way.
const loadQuery = "SELECT 'v', CAST(version AS CHAR), NULL, NULL, NULL, NULL FROM %[1]s.map_version " +
	"UNION ALL SELECT 'm', name, kind, NULL, NULL, NULL FROM %[1]s.mappings " +
	"UNION ALL SELECT 's', mapping, name, group_name, range_from, range_to FROM %[1]s.shards " +
	"UNION ALL SELECT 't', schema_name, table_name, mapping, column_name, CAST(scatter AS CHAR) FROM %[1]s.tables"

// ReadConfig reads the shard map's tables in schema (DefaultSchema if "") through q, in one consistent read. A row
// keyway cannot use is an error naming its table and key; FromConfig checks the rest.
func ReadConfig(ctx context.Context, q Querier, schema string) (Config, error) {
	schema = schemaOrDefault(schema)
	rows, err := q.QueryContext(ctx, fmt.Sprintf(loadQuery, quoteIdent(schema)))
	if err != nil {
		return Config{}, fmt.Errorf("shard: read the shard map from %s: %w", schema, err)
	}
	defer rows.Close()
	var (
		c        Config
		versions int
		byName   = make(map[string]*MappingConfig)
		probs    []error
		bad      = func(format string, args ...any) { probs = append(probs, fmt.Errorf(schema+"."+format, args...)) }
		mappings []*MappingConfig
	)
	type pending struct {
		mapping string
		s       ShardConfig
		t       TableConfig
		shard   bool
	}
	var later []pending
	for rows.Next() {
		var what string
		var f [5]sql.NullString
		if err := rows.Scan(&what, &f[0], &f[1], &f[2], &f[3], &f[4]); err != nil {
			return Config{}, fmt.Errorf("shard: read the shard map from %s: %w", schema, err)
		}
		switch what {
		case "v":
			versions++
			v, err := strconv.ParseUint(f[0].String, 10, 64)
			if err != nil || v == 0 {
				bad("map_version row (id 1): version %q: want a whole number above 0", f[0].String)
			}
			c.Version = v
		case "m":
			mc := &MappingConfig{Name: f[0].String, Kind: f[1].String}
			byName[mc.Name] = mc
			mappings = append(mappings, mc)
		case "s":
			s := ShardConfig{Name: f[1].String, Group: f[2].String, From: f[3].String, To: f[4].String}
			later = append(later, pending{mapping: f[0].String, s: s, shard: true})
		case "t":
			name := f[1].String
			if f[0].String != "" {
				name = f[0].String + "." + name
			}
			later = append(later, pending{mapping: f[2].String, t: TableConfig{Table: name, Column: f[3].String, Scatter: f[4].String == "1"}})
		}
	}
	if err := rows.Err(); err != nil {
		return Config{}, fmt.Errorf("shard: read the shard map from %s: %w", schema, err)
	}
	switch {
	case versions == 0:
		bad("map_version has no row: insert one with the map (INSERT INTO %s.map_version (id, version) VALUES (1, 1))", quoteIdent(schema))
	case versions > 1:
		bad("map_version has %d rows: want one (id = 1)", versions)
	}
	for _, p := range later {
		mc := byName[p.mapping]
		if mc == nil {
			if p.shard {
				bad("shards row (%s, %s): mapping %q is not in %s.mappings", p.mapping, p.s.Name, p.mapping, schema)
			} else {
				bad("tables row (%s): mapping %q is not in %s.mappings", p.t.Table, p.mapping, schema)
			}
			continue
		}
		if p.shard {
			if k, err := ParseKind(mc.Kind); err == nil && k.hashed() && (p.s.From != "" || p.s.To != "") {
				bad("shards row (%s, %s): a %s shard's range is its name: set range_from and range_to to NULL", p.mapping, p.s.Name, k)
				continue
			}
			mc.Shards = append(mc.Shards, p.s)
		} else {
			mc.Tables = append(mc.Tables, p.t)
		}
	}
	if err := errors.Join(probs...); err != nil {
		return Config{}, fmt.Errorf("shard: %w", err)
	}
	slices.SortFunc(mappings, func(a, b *MappingConfig) int { return strings.Compare(a.Name, b.Name) })
	for _, mc := range mappings {
		slices.SortFunc(mc.Tables, func(a, b TableConfig) int { return strings.Compare(a.Table, b.Table) })
		c.Mappings = append(c.Mappings, *mc)
	}
	return c, nil
}

// Load reads the shard map from the tables in schema (DefaultSchema if "") through q, a connection to the global
// group, and builds it with global as its global group and groups (if not nil) as the groups that exist. An error
// names the rows at fault; the caller keeps the map it had.
func Load(ctx context.Context, q Querier, schema, global string, groups []string) (*Map, error) {
	c, err := ReadConfig(ctx, q, schema)
	if err != nil {
		return nil, err
	}
	c.Global, c.Groups = global, groups
	m, err := FromConfig(c)
	if err != nil {
		return nil, fmt.Errorf("shard: the map in %s: %w", schemaOrDefault(schema), err)
	}
	return m, nil
}

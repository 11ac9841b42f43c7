package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/binlog"
	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/container"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/shard"
)

// Check connects to every backend group of cfg (a validated config) as keyway would when serving it, and returns
// one line per problem it finds, without opening any listener:
//   - a primary that cannot be reached, or that refuses the group's account or a SQL user's backend account;
//   - a container table the group's account lacks SELECT, INSERT, UPDATE or DELETE on;
//   - a container table that does not fit its definition (the same check as at startup: container.Open); a
//     container on a table the config's shard map shards, on each of its shards' groups;
//   - a binary log the follower cannot use, or an account without REPLICATION SLAVE and CLIENT (binlog.Check),
//     for groups whose invalidate is "auto" or "binlog".
//
// A group whose primary cannot be reached, or refuses the group's account, is not checked further: every other
// check of it would fail for the same reason. A container's privileges are probed on the server (EXPLAIN), which
// counts the account's default roles; the follower's are read from SHOW GRANTS, which does not, so replication
// privileges held through a role are reported as lacking.
//
// It also returns warnings, one line each, about what keyway can work with but the operator should fix: for groups
// with replicas, each replica as checkReplicas says.
func Check(ctx context.Context, cfg config.Config) (problems, warnings []string) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := groupOptions(cfg, quiet)
	for i := range opts {
		// check only looks: without replicas its topology has no position watcher, which could follow a replica
		// it finds writable (see backend's roleCheck); checkReplicas reads the replicas itself.
		opts[i].Replicas = nil
	}
	topo, err := backend.NewTopology(opts)
	if err != nil {
		return []string{err.Error()}, nil
	}
	defer topo.Close()
	for _, g := range cfg.Groups {
		problems = append(problems, checkGroup(ctx, cfg, g, topo.Group(g.Name), quiet)...)
		warnings = append(warnings, checkReplicas(ctx, cfg, g, topo.Group(g.Name))...)
	}
	return problems, warnings
}

// checkGroup checks one group: its account, its SQL users' backend accounts, its containers and its binlog.
func checkGroup(ctx context.Context, cfg config.Config, g config.Group, grp *backend.Group, quiet *slog.Logger) []string {
	var out []string
	say := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("group %q: ", g.Name)+fmt.Sprintf(format, args...))
	}
	db := container.OpenDB(grp.SQLConfig())
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		say("%s", loginProblem(g.Primary, g.User, groupAccount, err))
		return out
	}

	for _, u := range cfg.SQL.Users {
		if u.Group != g.Name || u.BackendUser == g.User && u.BackendPassword == g.Password {
			continue
		}
		dc := grp.SQLConfig()
		dc.User, dc.Passwd = u.BackendUser, u.BackendPassword
		if err := pingAs(ctx, dc); err != nil {
			say("%s", loginProblem(g.Primary, u.BackendUser, fmt.Sprintf("sql.users %q (backend_user, backend_password)", u.Name), err))
		}
	}

	type checked struct {
		def      container.Def
		policies container.Policies
	}
	var cs []checked
	if cfg.Migrate.InnodbMemcache == g.Name {
		imported, err := container.ImportInnodbMemcache(ctx, db)
		if err != nil {
			say("migrate.innodb_memcache: %v", err)
		}
		for _, c := range imported {
			cs = append(cs, checked{c.Def, c.Policies})
		}
	}
	// A container on a table the config's shard map shards is checked on each of its shards' groups instead of its
	// own (a map in keyway_shards tables is not read here: such containers are checked on their group).
	var shards *shard.Map
	if cfg.ShardingInUse() && cfg.Sharding.Source != config.ShardSourceTable {
		shards, _ = shard.FromConfig(cfg.ShardConfig()) // the config was validated: it builds
	}
	for _, c := range cfg.Containers {
		def := containerDef(c)
		if t := shards.Table(def.Schema, def.Table); t != nil {
			if slices.Contains(t.Mapping.Groups(), g.Name) {
				cs = append(cs, checked{def, containerPolicies(c)})
			}
			continue
		}
		if c.Group == g.Name {
			cs = append(cs, checked{def, containerPolicies(c)})
		}
	}
	for _, c := range cs {
		// The startup check itself: the privileges the container needs (the server answers for every kind of
		// grant), columns, types and the key's index.
		ct, err := container.Open(ctx, db, c.def, container.Options{Backend: fmt.Sprintf("group %s (%s)", g.Name, g.Primary),
			Logger: quiet, ReadOnly: !c.policies.WritesTable()})
		if err != nil {
			say("%s", containerProblem(g.Primary, g.User, c.def, err))
			continue
		}
		if err := ct.NotChecked(); err != nil {
			say("%v", err)
		}
		ct.Close()
	}

	if g.Invalidate == config.InvalidateAuto || g.Invalidate == config.InvalidateBinlog {
		user, password, dial, tc := grp.ReplicaLogin()
		if g.BinlogUser != "" {
			user, password = g.BinlogUser, g.BinlogPassword
		}
		if _, err := binlog.Check(ctx, binlog.Options{Group: g.Name, User: user, Password: password, Dial: dial, TLS: tc}); err != nil {
			// binlog's connection errors name the group already.
			msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("group %q: ", g.Name))
			if _, ok := errors.AsType[*binlog.UnusableError](err); ok {
				msg += "; " + withoutBinlog
			}
			say("binlog follower: %s", msg)
		}
	}
	return out
}

// withoutBinlog is the way out for a group whose server's binlog a follower cannot use, besides fixing the server.
const withoutBinlog = `or do without a follower: set invalidate = "ttl" on the group (cached copies live for their ttl, so a write made ` +
	`directly in MySQL shows through keyway after it at most), or invalidate = "none" (cached copies learn only of ` +
	`writes made through keyway)`

// containerDef is a [[containers]] entry as package container takes it.
func containerDef(c config.Container) container.Def {
	schema, table, _ := strings.Cut(c.Table, ".")
	return container.Def{Name: c.Name, Schema: schema, Table: table, KeyColumn: c.Key, ValueColumns: c.Values,
		Separator: c.Separator, FlagsColumn: c.Flags, CASColumn: c.CAS, ExpiryColumn: c.Expiry}
}

// pingAs logs in once with dc.
func pingAs(ctx context.Context, dc *mysql.Config) error {
	connector, err := mysql.NewConnector(dc)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	return db.PingContext(ctx)
}

// groupAccount is what to fix when the server refuses a group's own account.
const groupAccount = "the group's account (user, password) in [[groups]]"

// loginProblem says why logging in to primary as user failed: the server refused the account (an error of the
// server's, such as 1045 access denied: fix what) or it could not be reached at all.
func loginProblem(primary, user, what string, err error) string {
	if code, state, msg, ok := serverError(err); ok {
		return fmt.Sprintf("primary %s refuses user %q: Error %d (%s): %s: fix %s", primary, user, code, state, msg, what)
	}
	var ue *backend.UnavailableError
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Sprintf("primary %s is unreachable: %v", primary, err)
}

// containerProblem says why container.Open failed for def on a group whose own account (user, on primary) the
// container uses: a login the server refused, as loginProblem says it, after the container's name; anything else
// is the container's own error, which names it and says the fix.
func containerProblem(primary, user string, def container.Def, err error) string {
	if code, _, _, ok := serverError(err); ok && loginRefusals[code] {
		return fmt.Sprintf("container %q (%s.%s): %s", def.Name, def.Schema, def.Table, loginProblem(primary, user, groupAccount, err))
	}
	return err.Error()
}

// loginRefusals are the server's errors that refuse an account itself (not one statement of it): access denied, an
// authentication method the client cannot use, an expired password, a locked account.
var loginRefusals = map[uint16]bool{
	mysqlwire.ERAccessDenied:            true,
	mysqlwire.ERNotSupportedAuthMode:    true,
	mysqlwire.ERAccessDeniedNoPassword:  true,
	mysqlwire.ERMustChangePassword:      true,
	mysqlwire.ERMustChangePasswordLogin: true,
	mysqlwire.ERAccountLockedMySQL:      true,
	mysqlwire.ERAccountLockedMariaDB:    true,
}

// serverError finds the server's error in err: from go-sql-driver (a ping, a container's query) or from mysqlwire
// (the group's health check, which marked the group down first); both are told alike.
func serverError(err error) (code uint16, state, msg string, ok bool) {
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return me.Number, string(me.SQLState[:]), me.Message, true
	}
	if me, ok := errors.AsType[*mysqlwire.Error](err); ok {
		return me.Code, me.State, me.Message, true
	}
	return 0, "", "", false
}

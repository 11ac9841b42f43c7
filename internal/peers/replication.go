package peers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Replication is a MariaDB primary with GTID replicas on this machine, each a MariaDB of its own (private data
// directory, free port). Every member has server_id 1, 2, … in start order, log_slave_updates and the binlog in ROW
// format; replicas replicate from the primary with MASTER_USE_GTID = slave_pos and run with read_only = ON.
// With SemiSync the primary runs the master side (wait point AFTER_SYNC) and the replicas the slave side.
//
// Primary and Replicas are the roles as this Replication last set them: Promote makes a member the primary and
// the old primary the first replica (which it is not until Repoint points it somewhere). Kill, Shutdown and Start
// on a member change no role.
//
// Accounts beside MariaDB's root and app, on every member:
//   - 'kw'@'%' (password "secret", KwDSN) holds what keyway needs and no more: SELECT, INSERT, UPDATE, DELETE,
//     CREATE, DROP, ALTER, INDEX, CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW,
//     PROCESS, REPLICATION SLAVE, BINLOG MONITOR and SLAVE MONITOR on *.*. It has neither SUPER nor
//     READ ONLY ADMIN, so read_only stops its writes on a replica; app's ALL PRIVILEGES includes
//     READ ONLY ADMIN, so app writes through read_only.
//   - 'repl'@'%' (password "repl", REPLICATION SLAVE) is the account replicas connect with.
//
// Accounts and database test are created on each member outside the binlog (sql_log_bin = 0), so every member's
// GTID positions start empty.
type Replication struct {
	Primary  *MariaDB
	Replicas []*MariaDB

	semiSync bool
}

// ReplicationOptions describe a Replication.
type ReplicationOptions struct {
	// Replicas is how many replicas the primary gets (0 means 2).
	Replicas int
	// SemiSync turns on semi-synchronous replication, AFTER_SYNC; StartReplication returns once the primary
	// counts every replica as a semi-sync client. (MariaDB's defaults stay: a primary waits up to
	// rpl_semi_sync_master_timeout, 10 s, for an acknowledgement before it falls back to asynchronous.)
	SemiSync bool
	// Server is what every member shares (TLS, MaxConnections, GTIDDomainID); StartReplication sets
	// ServerID, LogSlaveUpdates, ReadOnly and the semi-sync sides per role. NoBinlog is refused.
	Server MariaDBOptions
}

// memberAccounts are the accounts setup adds on a member of a Replication (see Replication).
var memberAccounts = []string{
	"CREATE USER 'kw'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('secret')",
	"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, CREATE TEMPORARY TABLES, LOCK TABLES, " +
		"EXECUTE, CREATE VIEW, SHOW VIEW, PROCESS, REPLICATION SLAVE, BINLOG MONITOR, SLAVE MONITOR ON *.* TO 'kw'@'%'",
	"CREATE USER 'repl'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('repl')",
	"GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'",
}

// replicaTimeout bounds the waits for a replica to connect and catch up in StartReplication, Promote and Repoint.
const replicaTimeout = 30 * time.Second

// StartReplication starts a primary and o.Replicas replicas, points the replicas at the primary and returns once
// every replica replicates and has applied everything the primary has. mariadb-install-db runs once: the other
// members start from a copy of that data directory. ctx bounds the start only; the servers run until Stop.
func StartReplication(ctx context.Context, o ReplicationOptions) (_ *Replication, err error) {
	if o.Replicas < 0 {
		return nil, fmt.Errorf("peers: ReplicationOptions.Replicas = %d", o.Replicas)
	}
	if o.Server.NoBinlog {
		return nil, errors.New("peers: a Replication needs the binlog: ReplicationOptions.Server.NoBinlog must be false")
	}
	n := o.Replicas
	if n == 0 {
		n = 2
	}
	var members []*MariaDB
	defer func() {
		if err != nil {
			for _, m := range members {
				_ = m.Stop()
			}
		}
	}()
	for i := 0; i <= n; i++ {
		mo := o.Server
		mo.ServerID = i + 1
		mo.LogSlaveUpdates = true
		mo.ReadOnly = i > 0
		mo.SemiSyncMaster = o.SemiSync && i == 0
		mo.SemiSyncSlave = o.SemiSync && i > 0
		m, err := newMariaDB(mo)
		if err != nil {
			return nil, err
		}
		members = append(members, m)
	}
	r := &Replication{Primary: members[0], Replicas: members[1:], semiSync: o.SemiSync}

	if err := r.Primary.install(ctx); err != nil {
		return nil, err
	}
	for _, m := range r.Replicas {
		if err := copyDir(ctx, r.Primary.DataDir, m.DataDir); err != nil {
			return nil, err
		}
	}
	if err := eachMember(members, func(m *MariaDB) error {
		if err := m.start(ctx, 0); err != nil {
			return err
		}
		return m.setup(ctx, true)
	}); err != nil {
		return nil, err
	}
	if err := eachMember(r.Replicas, func(m *MariaDB) error { return replicate(ctx, m, r.Primary) }); err != nil {
		return nil, err
	}
	if o.SemiSync {
		if err := waitSemiSyncClients(ctx, r.Primary, n); err != nil {
			return nil, err
		}
	}
	if err := r.Sync(ctx, replicaTimeout); err != nil {
		return nil, err
	}
	return r, nil
}

// eachMember runs f on every member at once and joins the errors.
func eachMember(ms []*MariaDB, f func(*MariaDB) error) error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { errs[i] = f(m) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// copyDir copies the directory src to dst (which must not exist), keeping modes and sparse files.
func copyDir(ctx context.Context, src, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "-a", "--sparse=always", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("peers: cp -a %s %s: %w%s", src, dst, err, formatTail("output", string(out)))
	}
	return nil
}

// Members returns the primary, then the replicas.
func (r *Replication) Members() []*MariaDB {
	return append([]*MariaDB{r.Primary}, r.Replicas...)
}

// Stop stops every member for good (MariaDB.Stop) and joins their errors: a member that exited on its own is
// one.
func (r *Replication) Stop() error {
	var errs []error
	for _, m := range r.Members() {
		errs = append(errs, m.Stop())
	}
	return errors.Join(errs...)
}

// Sync waits up to timeout until every running member of Replicas has applied everything in the primary's
// binlog. (An old primary counts once it runs: Repoint it first.)
func (r *Replication) Sync(ctx context.Context, timeout time.Duration) error {
	pos, err := r.Primary.GTIDs(ctx)
	if err != nil {
		return err
	}
	var running []*MariaDB
	for _, m := range r.Replicas {
		if m.Running() {
			running = append(running, m)
		}
	}
	return eachMember(running, func(m *MariaDB) error { return m.WaitCaughtUp(ctx, pos.Binlog, timeout) })
}

// Promote makes m the primary. First m applies everything it received (its SQL thread is started if stopped;
// a MASTER_DELAY is waited out, up to 30 s): with semi-sync, that is every acknowledged write. Then STOP
// SLAVE, RESET SLAVE ALL, read_only = OFF (and with semi-sync, the master side on, the slave side off). The old
// primary becomes the first of Replicas, running or not; point it (and the other replicas) at m with Repoint.
// A later Start of m keeps its new role.
func (r *Replication) Promote(ctx context.Context, m *MariaDB) error {
	i := slices.Index(r.Replicas, m)
	if i < 0 {
		return fmt.Errorf("peers: Promote %s: not a replica of this Replication", m.Addr)
	}
	// The IO thread must stay up meanwhile: in GTID mode MariaDB discards the relay log when a slave thread
	// starts while both are stopped.
	if err := m.exec(ctx, "START SLAVE SQL_THREAD"); err != nil {
		return err
	}
	st, err := m.SlaveStatus(ctx)
	if err != nil {
		return err
	}
	if err := m.WaitCaughtUp(ctx, st["Gtid_IO_Pos"], replicaTimeout); err != nil {
		return fmt.Errorf("peers: Promote: %w", err)
	}
	stmts := []string{"STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF"}
	if r.semiSync {
		stmts = append(stmts, "SET GLOBAL rpl_semi_sync_slave_enabled = OFF",
			"SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC", "SET GLOBAL rpl_semi_sync_master_enabled = ON")
	}
	if err := m.exec(ctx, stmts...); err != nil {
		return err
	}
	m.opts.ReadOnly, m.opts.SemiSyncMaster, m.opts.SemiSyncSlave = false, r.semiSync, false
	others := slices.Delete(slices.Clone(r.Replicas), i, i+1)
	r.Primary, r.Replicas = m, append([]*MariaDB{r.Primary}, others...)
	return nil
}

// Repoint makes m replicate from primary, from where m's own binlog ends: STOP SLAVE; gtid_slave_pos =
// @@gtid_binlog_pos (m logs what it applies, so this is everything it has, an old primary's own writes
// included); CHANGE MASTER TO … MASTER_USE_GTID = slave_pos; read_only = ON (and with semi-sync, the slave side
// on, the master side off); START SLAVE. It returns once m replicates (and, with semi-sync, primary has a
// semi-sync client), or with the replication error. A later Start of m keeps its new role.
func (r *Replication) Repoint(ctx context.Context, m, primary *MariaDB) error {
	if m == r.Primary {
		return fmt.Errorf("peers: Repoint %s: it is the primary; Promote another member first", m.Addr)
	}
	stmts := []string{"STOP SLAVE", "SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos", "SET GLOBAL read_only = ON"}
	if r.semiSync {
		stmts = append(stmts, "SET GLOBAL rpl_semi_sync_master_enabled = OFF", "SET GLOBAL rpl_semi_sync_slave_enabled = ON")
	}
	if err := m.exec(ctx, stmts...); err != nil {
		return err
	}
	m.opts.ReadOnly, m.opts.SemiSyncMaster, m.opts.SemiSyncSlave = true, false, r.semiSync
	if err := replicate(ctx, m, primary); err != nil {
		return err
	}
	if r.semiSync {
		return waitSemiSyncClients(ctx, primary, 1)
	}
	return nil
}

// replicate points m at primary from m's gtid_slave_pos, starts the slave threads and waits until both run.
func replicate(ctx context.Context, m, primary *MariaDB) error {
	change := fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %d, "+
		"MASTER_USER = 'repl', MASTER_PASSWORD = 'repl', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1", primary.Port)
	if err := m.exec(ctx, change, "START SLAVE"); err != nil {
		return err
	}
	return m.waitReplicating(ctx)
}

// waitSemiSyncClients waits until primary counts at least n semi-sync replicas.
func waitSemiSyncClients(ctx context.Context, primary *MariaDB, n int) error {
	return poll(ctx, replicaTimeout, func() (bool, error) {
		v, err := primary.GlobalStatus(ctx, "Rpl_semi_sync_master_clients")
		if err != nil {
			return false, err
		}
		c, _ := strconv.Atoi(v)
		return c >= n, nil
	}, func() string { return fmt.Sprintf("%s has fewer than %d semi-sync clients", primary.Addr, n) })
}

// GTIDPositions are a server's GTID positions, as MariaDB spells them ("0-1-42,1-3-7").
type GTIDPositions struct {
	Current string // @@gtid_current_pos: the newest of binlog and slave positions, per domain
	Slave   string // @@gtid_slave_pos: what the server applied as a replica
	Binlog  string // @@gtid_binlog_pos: the last GTID of each domain in its binlog
}

// GTIDs reads m's GTID positions.
func (m *MariaDB) GTIDs(ctx context.Context) (GTIDPositions, error) {
	var p GTIDPositions
	err := m.root(ctx, func(c *sql.Conn) error {
		return c.QueryRowContext(ctx, "SELECT @@gtid_current_pos, @@gtid_slave_pos, @@gtid_binlog_pos").
			Scan(&p.Current, &p.Slave, &p.Binlog)
	})
	if err != nil {
		return GTIDPositions{}, fmt.Errorf("peers: GTID positions of %s: %w", m.Addr, err)
	}
	return p, nil
}

// WaitCaughtUp waits up to timeout, with MASTER_GTID_WAIT, until m's gtid_slave_pos reaches pos in every domain
// pos names. It returns an error when m did not get there in time.
func (m *MariaDB) WaitCaughtUp(ctx context.Context, pos string, timeout time.Duration) error {
	var res sql.NullInt64
	err := m.root(ctx, func(c *sql.Conn) error {
		return c.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, timeout.Seconds()).Scan(&res)
	})
	if err != nil {
		return fmt.Errorf("peers: MASTER_GTID_WAIT('%s') on %s: %w", pos, m.Addr, err)
	}
	if res.Int64 != 0 || !res.Valid {
		p, _ := m.GTIDs(ctx)
		return fmt.Errorf("peers: %s has not applied %s within %v (gtid_slave_pos %q)", m.Addr, pos, timeout, p.Slave)
	}
	return nil
}

// StopSQLThread stops m applying what it receives (STOP SLAVE SQL_THREAD): it falls behind its primary. The IO
// thread keeps receiving into the relay log (which MariaDB discards, in GTID mode, if a thread starts while both
// are stopped: the replica then fetches again from its gtid_slave_pos).
func (m *MariaDB) StopSQLThread(ctx context.Context) error {
	return m.exec(ctx, "STOP SLAVE SQL_THREAD")
}

// StartSQLThread starts m applying again (START SLAVE SQL_THREAD).
func (m *MariaDB) StartSQLThread(ctx context.Context) error {
	return m.exec(ctx, "START SLAVE SQL_THREAD")
}

// SetDelay makes replica m apply each transaction no sooner than seconds after the primary committed it
// (MASTER_DELAY; 0 ends the delay). The slave threads restart.
func (m *MariaDB) SetDelay(ctx context.Context, seconds int) error {
	if err := m.exec(ctx, "STOP SLAVE", fmt.Sprintf("CHANGE MASTER TO MASTER_DELAY = %d", seconds), "START SLAVE"); err != nil {
		return err
	}
	return m.waitReplicating(ctx)
}

// SlaveStatus returns SHOW SLAVE STATUS as column → value, or nil when m is not a replica.
func (m *MariaDB) SlaveStatus(ctx context.Context) (map[string]string, error) {
	var st map[string]string
	err := m.root(ctx, func(c *sql.Conn) error {
		rows, err := c.QueryContext(ctx, "SHOW SLAVE STATUS")
		if err != nil {
			return err
		}
		defer rows.Close()
		cols, err := rows.Columns()
		if err != nil {
			return err
		}
		if !rows.Next() {
			return rows.Err()
		}
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		st = make(map[string]string, len(cols))
		for i, c := range cols {
			st[c] = vals[i].String
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("peers: SHOW SLAVE STATUS on %s: %w", m.Addr, err)
	}
	return st, nil
}

// GlobalStatus returns the global status variable name (SHOW GLOBAL STATUS), "" when there is none.
func (m *MariaDB) GlobalStatus(ctx context.Context, name string) (string, error) {
	var v string
	err := m.root(ctx, func(c *sql.Conn) error {
		err := c.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE "+quoteString(name)).Scan(new(string), &v)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("peers: SHOW GLOBAL STATUS LIKE '%s' on %s: %w", name, m.Addr, err)
	}
	return v, nil
}

// waitReplicating waits until both of m's slave threads run; a thread that stopped is an error quoting
// MariaDB's.
func (m *MariaDB) waitReplicating(ctx context.Context) error {
	var last map[string]string
	return poll(ctx, replicaTimeout, func() (bool, error) {
		st, err := m.SlaveStatus(ctx)
		if err != nil {
			return false, err
		}
		if st == nil {
			return false, fmt.Errorf("peers: %s is not a replica", m.Addr)
		}
		last = st
		io, sqlThread := st["Slave_IO_Running"], st["Slave_SQL_Running"]
		if io == "No" || sqlThread == "No" {
			return false, fmt.Errorf("peers: %s stopped replicating: IO thread %s (%s), SQL thread %s (%s)",
				m.Addr, io, st["Last_IO_Error"], sqlThread, st["Last_SQL_Error"])
		}
		return io == "Yes" && sqlThread == "Yes", nil
	}, func() string {
		return fmt.Sprintf("%s does not replicate: IO thread %s (%s)", m.Addr, last["Slave_IO_Running"], last["Last_IO_Error"])
	})
}

// poll calls done every 20 ms until it reports true or an error, or timeout passes (then the error says what).
func poll(ctx context.Context, timeout time.Duration, done func() (bool, error), what func() string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("peers: %s after %v: %w", what(), timeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// ExecUnlogged runs stmts in order as root on one connection of m with sql_log_bin = 0: they change m alone, and no
// replica sees them (a test's per-member row, telling which server answered a read).
func (m *MariaDB) ExecUnlogged(ctx context.Context, stmts ...string) error {
	return m.exec(ctx, append([]string{"SET SESSION sql_log_bin = 0"}, stmts...)...)
}

// exec runs stmts in order as root on one connection.
func (m *MariaDB) exec(ctx context.Context, stmts ...string) error {
	return m.root(ctx, func(c *sql.Conn) error {
		for _, s := range stmts {
			if _, err := c.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("peers: %s on %s: %w", s, m.Addr, err)
			}
		}
		return nil
	})
}

// root runs f on a fresh root connection over the unix socket (a pool would outlive a Kill).
func (m *MariaDB) root(ctx context.Context, f func(*sql.Conn) error) error {
	db, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

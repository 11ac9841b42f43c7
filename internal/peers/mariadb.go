package peers

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MariaDB is a private MariaDB server in a temporary directory: binlog on in
// ROW format (unless MariaDBOptions.NoBinlog), server-id 1 (unless
// MariaDBOptions.ServerID), listening on 127.0.0.1 and a unix socket.
//
// Accounts: root without a password (RootDSN uses the unix socket, where
// root@localhost matches); 'app'@'%' and 'app'@'localhost' with password
// "secret" (mysql_native_password) and ALL PRIVILEGES ON *.* WITH GRANT
// OPTION, which covers REPLICATION SLAVE for a binlog follower (and READ ONLY
// ADMIN, so app writes through read_only). The anonymous accounts a fresh data
// directory has are dropped, so they cannot shadow app. Database `test` exists.
// The members of a Replication have two accounts more, described there.
//
// Stop ends the server for good. Kill (a crash) or Shutdown (graceful) end
// only the process: Start runs it again on the same data and port.
type MariaDB struct {
	Addr     string // "127.0.0.1:port"
	Port     int
	Socket   string // unix socket path
	DataDir  string
	ErrorLog string // mariadbd's error log, quoted in start errors

	// go-sql-driver DSNs without parameters; append "?key=value" as needed.
	RootDSN string // root over the unix socket, no default database
	AppDSN  string // app:secret over TCP, database test
	KwDSN   string // kw:secret over TCP, database test; members of a Replication only, else ""

	dir  string // temp dir holding DataDir, Socket and ErrorLog; removed by Stop
	proc *Process
	opts MariaDBOptions
}

// MariaDBOptions change how StartMariaDBWith starts mariadbd. The zero value is StartMariaDB's server.
type MariaDBOptions struct {
	// SSLCert and SSLKey (PEM files, e.g. from SelfSignedCert or CertAuthority) make the server offer TLS
	// (--ssl-cert, --ssl-key); SSLCA (--ssl-ca) is the CA it trusts for client certificates. Without them the
	// server offers no TLS (MariaDB 10.x generates no certificate of its own).
	SSLCert, SSLKey, SSLCA string
	// NoBinlog starts the server as Debian's package does, with log_bin off (no --log-bin): what a binlog
	// follower cannot follow.
	NoBinlog bool
	// MaxConnections, when set, is the server's max_connections (MariaDB's default is 151).
	MaxConnections int

	// What a member of a Replication needs; StartReplication sets them per role.

	// ServerID is the server_id (0 means 1); GTIDDomainID the gtid_domain_id (MariaDB's default 0).
	ServerID, GTIDDomainID int
	// LogSlaveUpdates writes what the server applies as a replica to its own binlog (log_slave_updates), so
	// it can be promoted and the other replicas repointed to it by GTID.
	LogSlaveUpdates bool
	// ReadOnly starts the server with read_only = ON.
	ReadOnly bool
	// SemiSyncMaster turns on the primary side of semi-synchronous replication (rpl_semi_sync_master_enabled,
	// wait point AFTER_SYNC), SemiSyncSlave the replica side (rpl_semi_sync_slave_enabled); MariaDB 10.3+
	// has both built in.
	SemiSyncMaster, SemiSyncSlave bool
}

const (
	// mariadbStartTimeout bounds the wait for a started mariadbd to accept
	// connections.
	mariadbStartTimeout = 60 * time.Second
	// mariadbInstallTimeout bounds mariadb-install-db.
	mariadbInstallTimeout = 2 * time.Minute
	// maxSocketPath keeps the socket path under the kernel's 108-byte limit
	// for sun_path.
	maxSocketPath = 100
)

// StartMariaDB creates a data directory with mariadb-install-db, starts
// mariadbd on a free loopback port, waits until it accepts connections and
// sets up the accounts described on MariaDB. ctx bounds the start only; the
// server runs until Stop, which also removes its directory.
func StartMariaDB(ctx context.Context) (*MariaDB, error) {
	return StartMariaDBWith(ctx, MariaDBOptions{})
}

// StartMariaDBWith is StartMariaDB with options (a server that offers TLS).
func StartMariaDBWith(ctx context.Context, o MariaDBOptions) (_ *MariaDB, err error) {
	m, err := newMariaDB(o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = m.Stop()
		}
	}()
	if err := m.install(ctx); err != nil {
		return nil, err
	}
	if err := m.start(ctx, 0); err != nil {
		return nil, err
	}
	if err := m.setup(ctx, false); err != nil {
		return nil, err
	}
	return m, nil
}

// newMariaDB checks o and the programs and makes the server's directory; nothing runs yet.
func newMariaDB(o MariaDBOptions) (*MariaDB, error) {
	if (o.SSLCert == "") != (o.SSLKey == "") {
		return nil, errors.New("peers: MariaDBOptions needs both SSLCert and SSLKey, or neither")
	}
	for _, prog := range []string{"mariadb-install-db", "mariadbd"} {
		if _, err := LookPath(prog); err != nil {
			return nil, err
		}
	}
	dir, err := shortTempDir("keyway-mariadb-")
	if err != nil {
		return nil, err
	}
	return &MariaDB{
		DataDir:  filepath.Join(dir, "data"),
		Socket:   filepath.Join(dir, "sock"),
		ErrorLog: filepath.Join(dir, "error.log"),
		dir:      dir,
		opts:     o,
	}, nil
}

// mariadbUser is the --user both programs get: root can only run them with
// --user=root; anyone else runs them as themselves.
func mariadbUser() (string, error) {
	if os.Geteuid() == 0 {
		return "root", nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("peers: who am I (for mariadbd --user): %w", err)
	}
	return u.Username, nil
}

// tmpDir makes the instance's own temporary directory. A shared /tmp is not
// safe: a starting mariadbd deletes "#sql*" files it finds in its tmpdir,
// including those of another instance bootstrapping at the same moment.
func (m *MariaDB) tmpDir() (string, error) {
	tmp := filepath.Join(m.dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", fmt.Errorf("peers: mariadb tmpdir: %w", err)
	}
	return tmp, nil
}

// install creates the data directory with mariadb-install-db.
func (m *MariaDB) install(ctx context.Context) error {
	installDB, err := LookPath("mariadb-install-db")
	if err != nil {
		return err
	}
	runUser, err := mariadbUser()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, mariadbInstallTimeout)
	defer cancel()
	tmp, err := m.tmpDir()
	if err != nil {
		return err
	}
	args := []string{
		"--no-defaults",
		"--datadir=" + m.DataDir,
		"--user=" + runUser,
		"--auth-root-authentication-method=normal",
		"--tmpdir=" + tmp,
	}
	cmd := exec.CommandContext(ctx, installDB, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Kill the whole group on timeout: install-db is a script running
	// mariadbd --bootstrap underneath.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("peers: mariadb-install-db %s: %w%s", strings.Join(args, " "), err, formatTail("output", string(out)))
	}
	return nil
}

// start runs mariadbd on the data directory and waits until it accepts
// connections. Port 0 picks a free port (another on a lost bind race);
// otherwise the server must get that port (a restart).
func (m *MariaDB) start(ctx context.Context, port int) error {
	mariadbd, err := LookPath("mariadbd")
	if err != nil {
		return err
	}
	runUser, err := mariadbUser()
	if err != nil {
		return err
	}
	if _, err := m.tmpDir(); err != nil {
		return err
	}
	fixed := port != 0
	var lastErr error
	for attempt := 0; attempt < bindAttempts; attempt++ {
		if !fixed {
			if port, err = FreePort(); err != nil {
				return err
			}
			// A fresh error log per attempt, so the tail in an error is
			// this attempt's. (A restart appends to the old one.)
			_ = os.Remove(m.ErrorLog)
		}
		args := m.args(runUser, port)
		p, err := startProcess("mariadbd", mariadbd, args...)
		if err != nil {
			return err
		}
		p.Addr, p.Port = listenAddr(port), port
		m.proc = p

		// mariadbd creates the socket and the TCP listener only when it is
		// ready for clients, so a raw connect is the readiness test. (A
		// driver ping would log every refused attempt.)
		wctx, cancel := context.WithTimeout(ctx, mariadbStartTimeout)
		err = waitAccept(wctx, "unix", m.Socket, p)
		if err == nil {
			err = waitAccept(wctx, "tcp", p.Addr, p)
		}
		cancel()
		if err == nil {
			m.Addr, m.Port = p.Addr, port
			return nil
		}
		_ = p.Kill()
		log := m.errorLogTail()
		lastErr = fmt.Errorf("peers: start mariadbd %s: %w%s%s", strings.Join(args, " "), err, outputTail(p.out), formatTail("error log "+m.ErrorLog, log))
		if fixed || !isBindRace(log+p.Output()) || ctx.Err() != nil {
			return lastErr
		}
	}
	return lastErr
}

// args is mariadbd's command line for port.
func (m *MariaDB) args(runUser string, port int) []string {
	o := m.opts
	serverID := o.ServerID
	if serverID == 0 {
		serverID = 1
	}
	args := []string{
		"--no-defaults",
		"--datadir=" + m.DataDir,
		"--user=" + runUser,
		"--port=" + strconv.Itoa(port),
		"--socket=" + m.Socket,
		"--bind-address=127.0.0.1",
		"--binlog-format=ROW",
		"--server-id=" + strconv.Itoa(serverID),
		"--log-error=" + m.ErrorLog,
		"--pid-file=" + filepath.Join(m.dir, "mariadbd.pid"),
		"--tmpdir=" + filepath.Join(m.dir, "tmp"),
		"--relay-log=relay-bin", // the default name follows the host name
	}
	if !o.NoBinlog {
		args = append(args, "--log-bin")
	}
	if o.MaxConnections > 0 {
		args = append(args, "--max-connections="+strconv.Itoa(o.MaxConnections))
	}
	if o.SSLCert != "" {
		args = append(args, "--ssl-cert="+o.SSLCert, "--ssl-key="+o.SSLKey)
		if o.SSLCA != "" {
			args = append(args, "--ssl-ca="+o.SSLCA)
		}
	}
	if o.GTIDDomainID != 0 {
		args = append(args, "--gtid-domain-id="+strconv.Itoa(o.GTIDDomainID))
	}
	if o.LogSlaveUpdates {
		args = append(args, "--log-slave-updates")
	}
	if o.ReadOnly {
		args = append(args, "--read-only")
	}
	if o.SemiSyncMaster {
		args = append(args, "--rpl-semi-sync-master-enabled", "--rpl-semi-sync-master-wait-point=AFTER_SYNC")
	}
	if o.SemiSyncSlave {
		args = append(args, "--rpl-semi-sync-slave-enabled")
	}
	return args
}

// errorLogTail returns the last lines of the error log, or "".
func (m *MariaDB) errorLogTail() string {
	b, err := os.ReadFile(m.ErrorLog)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// setup drops the anonymous accounts and creates database test and the app
// accounts, as root over the socket. A member of a Replication also gets the
// kw and repl accounts, and its setup stays out of its binlog, so every
// member starts with the same data and an empty GTID position.
func (m *MariaDB) setup(ctx context.Context, member bool) error {
	root := mysql.NewConfig()
	root.User = "root"
	root.Net = "unix"
	root.Addr = m.Socket
	m.RootDSN = root.FormatDSN()

	app := mysql.NewConfig()
	app.User = "app"
	app.Passwd = "secret"
	app.Net = "tcp"
	app.Addr = m.Addr
	app.DBName = "test"
	m.AppDSN = app.FormatDSN()
	if member {
		kw := app.Clone()
		kw.User = "kw"
		m.KwDSN = kw.FormatDSN()
		root.Params = map[string]string{"sql_log_bin": "0"}
	}

	ctx, cancel := context.WithTimeout(ctx, mariadbStartTimeout)
	defer cancel()
	db, err := sql.Open("mysql", root.FormatDSN())
	if err != nil {
		return fmt.Errorf("peers: open %s: %w", m.RootDSN, err)
	}
	defer db.Close()

	// The fresh data directory has ''@'localhost' and ''@'<hostname>'; an
	// anonymous account with a more specific host would match a local app
	// client before 'app'@'%'. Drop whatever anonymous accounts exist.
	rows, err := db.QueryContext(ctx, "SELECT Host FROM mysql.user WHERE User = ''")
	if err != nil {
		return fmt.Errorf("peers: list anonymous accounts: %w", err)
	}
	var stmts []string
	for rows.Next() {
		var host string
		if err := rows.Scan(&host); err != nil {
			rows.Close()
			return fmt.Errorf("peers: list anonymous accounts: %w", err)
		}
		stmts = append(stmts, "DROP USER ''@"+quoteString(host))
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("peers: list anonymous accounts: %w", err)
	}
	stmts = append(stmts, "CREATE DATABASE IF NOT EXISTS test")
	for _, host := range []string{"%", "localhost"} {
		acct := "'app'@" + quoteString(host)
		stmts = append(stmts,
			"CREATE USER "+acct+" IDENTIFIED VIA mysql_native_password USING PASSWORD('secret')",
			"GRANT ALL PRIVILEGES ON *.* TO "+acct+" WITH GRANT OPTION",
		)
	}
	if member {
		stmts = append(stmts, memberAccounts...)
	}
	stmts = append(stmts, "FLUSH PRIVILEGES")
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("peers: set up MariaDB: %s: %w", s, err)
		}
	}
	return nil
}

// quoteString quotes s as a MySQL string literal.
func quoteString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(s) + "'"
}

// Stop kills mariadbd and removes its directory. The data is thrown away, so
// there is no graceful shutdown to wait for. Safe to call more than once.
func (m *MariaDB) Stop() error {
	var err error
	if m.proc != nil {
		err = m.proc.Kill()
	}
	if m.dir != "" {
		err = errors.Join(err, os.RemoveAll(m.dir))
	}
	return err
}

// Kill SIGKILLs mariadbd, as a crash would, and keeps its directory. It
// returns an error only when the server had already exited on its own.
func (m *MariaDB) Kill() error {
	if m.proc == nil {
		return nil
	}
	return m.proc.Kill()
}

// Shutdown stops mariadbd gracefully (SIGTERM) and keeps its directory.
func (m *MariaDB) Shutdown() error {
	if m.proc == nil {
		return nil
	}
	return m.proc.Stop()
}

// Start runs mariadbd again, after Kill or Shutdown, on the same data
// directory and port: a restart, which keeps the data (after a Kill, InnoDB
// recovers it). A replica resumes replicating on its own. It fails when the
// server is running, when it had exited on its own (that exit is the error),
// or when another process took the port meanwhile.
func (m *MariaDB) Start(ctx context.Context) error {
	if m.proc == nil || m.Port == 0 {
		return errors.New("peers: MariaDB.Start restarts a server that ran; use StartMariaDB")
	}
	if !m.proc.Exited() {
		return fmt.Errorf("peers: mariadbd %s is running: Kill or Shutdown it before Start", m.Addr)
	}
	if err := m.proc.Kill(); err != nil {
		return err
	}
	return m.start(ctx, m.Port)
}

// Running reports whether mariadbd is running.
func (m *MariaDB) Running() bool { return m.proc != nil && !m.proc.Exited() }

// Process returns the mariadbd child process (nil before it started).
func (m *MariaDB) Process() *Process { return m.proc }

// shortTempDir makes a temporary directory whose path leaves room for a unix
// socket inside it, falling back to /tmp when $TMPDIR is too deep.
func shortTempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("peers: make temp dir: %w", err)
	}
	if len(dir)+len("/sock") <= maxSocketPath {
		return dir, nil
	}
	_ = os.RemoveAll(dir)
	dir, err = os.MkdirTemp("/tmp", prefix)
	if err != nil {
		return "", fmt.Errorf("peers: make temp dir in /tmp ($TMPDIR is too long for a unix socket path): %w", err)
	}
	return dir, nil
}

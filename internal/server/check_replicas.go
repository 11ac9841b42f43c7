package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/container"
)

// checkReplicas looks at each of a group's replicas as keyway's member monitor will, and returns a warning (never
// a problem: a replica keyway cannot use only costs it the reads it would have taken) for each of:
//   - a replica that cannot be reached, or refuses the group's account or a SQL user's backend account, or that
//     is the primary itself under another name (the same server_id);
//   - a replica with read_only = OFF (MariaDB's default): a write sent there by mistake would be applied on the
//     replica alone;
//   - a replica that is not replicating (SHOW ALL SLAVES STATUS empty), whose replication threads are stopped,
//     that replicates without GTIDs, or that replicates from a server other than the group's primary: the same
//     server_id, else (when either is unknown) the same host and port, compared loosely (case, name resolution);
//     or whose replication the group's account may not see (it lacks SLAVE MONITOR, which the member monitor needs);
//   - an account keyway uses on the replica that may write through read_only: READ ONLY ADMIN (which ALL
//     PRIVILEGES includes), or SUPER where it still implies it (MariaDB before 10.11, MySQL). The grants are read
//     from SHOW GRANTS, which lists the account's own grants and its current (default) role's;
//   - a group account that may not read the primary's information_schema.INNODB_TRX (PROCESS): a switchover
//     cannot see its writes in flight end, and holds new writes for its whole hold.
func checkReplicas(ctx context.Context, cfg config.Config, g config.Group, grp *backend.Group) []string {
	if len(g.Replicas) == 0 {
		return nil
	}
	var out []string
	primaryDB := container.OpenDB(grp.SQLConfig())
	defer primaryDB.Close()
	primary := primaryIdentity(ctx, primaryDB)
	if warning := switchoverSight(ctx, primaryDB, g); warning != "" {
		out = append(out, warning)
	}
	type account struct{ user, password, what string }
	accounts := []account{{g.User, g.Password, groupAccount}}
	seen := map[[2]string]bool{{g.User, g.Password}: true}
	for _, u := range cfg.SQL.Users {
		if u.Group == g.Name && !seen[[2]string{u.BackendUser, u.BackendPassword}] {
			seen[[2]string{u.BackendUser, u.BackendPassword}] = true
			accounts = append(accounts, account{u.BackendUser, u.BackendPassword,
				fmt.Sprintf("sql.users %q (backend_user, backend_password)", u.Name)})
		}
	}
	for _, r := range g.Replicas {
		say := func(format string, args ...any) {
			out = append(out, fmt.Sprintf("group %q: replica %s ", g.Name, r.Address)+fmt.Sprintf(format, args...))
		}
		stateChecked := false
		for _, a := range accounts {
			dc, err := replicaConfig(grp, g, r, a.user, a.password)
			if err != nil {
				say("cannot be checked: %v", err)
				break
			}
			db, err := openDB(dc)
			if err != nil {
				say("cannot be checked: %v", err)
				break
			}
			var version, current string
			var serverID uint64
			err = db.QueryRowContext(ctx, "SELECT VERSION(), CURRENT_USER(), @@server_id").Scan(&version, &current, &serverID)
			if err != nil {
				db.Close()
				if code, state, msg, ok := serverError(err); ok && loginRefusals[code] {
					say("refuses user %q: Error %d (%s): %s: fix %s", a.user, code, state, msg, a.what)
					continue
				} else if ok {
					say("cannot be checked as user %q: %v", a.user, err)
					continue
				}
				say("is unreachable: %v", unwrapUnavailable(err))
				break // the other accounts would not reach it either
			}
			if !stateChecked { // the server's own state, once, by the first account it takes (the group's, the member monitor's)
				stateChecked = true
				if primary.serverID != 0 && serverID == primary.serverID {
					say("is the group's primary itself (server_id %d, as the primary %s): remove it from replicas", serverID, g.Primary)
					db.Close()
					break
				}
				out = append(out, replicaState(ctx, db, g, r, version, a.user, current, primary)...)
			}
			if priv, ok := writesThroughReadOnly(ctx, db, version); ok {
				say("lets user %q write through read_only: it holds %s, so a write sent to the replica would be applied "+
					"to it alone; keyway's accounts need neither: REVOKE %s ON *.* FROM %s (for ALL PRIVILEGES, grant "+
					"what keyway needs instead)", a.user, priv, revocable(priv), grantee(current))
			} else if priv != "" {
				say("cannot tell whether user %q may write through read_only: %s", a.user, priv)
			}
			db.Close()
		}
	}
	return out
}

// primaryID is what a replica's replication status is compared with: the primary's server_id and port as the
// primary reports them (0 when it cannot be asked: its own problem is reported elsewhere).
type primaryID struct {
	serverID uint64
	port     int
}

// primaryIdentity asks the primary (db, the group's account) for its primaryID.
func primaryIdentity(ctx context.Context, db *sql.DB) primaryID {
	var id primaryID
	if err := db.QueryRowContext(ctx, "SELECT @@server_id, @@port").Scan(&id.serverID, &id.port); err != nil {
		return primaryID{}
	}
	return id
}

// switchoverSight warns when the group's account (db, on the primary) may not read the primary's INNODB_TRX, from
// which a switchover learns that the writes in flight have ended (backend.Group.Switchover); "" when it may, or when
// the primary cannot be reached (the primary's own checks say so).
func switchoverSight(ctx context.Context, db *sql.DB, g config.Group) string {
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.INNODB_TRX").Scan(&n)
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok {
		return fmt.Sprintf("group %q: user %q may not read information_schema.INNODB_TRX on the primary (%v): a switchover cannot see the writes in flight end and holds new writes for its whole hold; GRANT PROCESS ON *.* TO the account", g.Name, g.User, me)
	}
	return ""
}

// replicaState warns about the replica's read_only and its replication. db is logged in as user (current is the
// account the server matched, for GRANT lines).
func replicaState(ctx context.Context, db *sql.DB, g config.Group, r config.Replica, version, user, current string, primary primaryID) []string {
	var out []string
	say := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("group %q: replica %s ", g.Name, r.Address)+fmt.Sprintf(format, args...))
	}
	var readOnly int
	if err := db.QueryRowContext(ctx, "SELECT @@read_only").Scan(&readOnly); err != nil {
		say("cannot be checked: SELECT @@read_only: %v", err)
	} else if readOnly == 0 {
		say("is writable (read_only = OFF, MariaDB's default): a write sent to it would be applied to the replica " +
			"alone; SET GLOBAL read_only = ON on it, and read_only = ON in its server configuration")
	}

	show := "SHOW SLAVE STATUS"
	if strings.Contains(version, "MariaDB") {
		show = "SHOW ALL SLAVES STATUS" // every connection of a multi-source replica, the default one included
	}
	conns, err := queryMaps(ctx, db, show)
	if err != nil {
		if code, _, _, ok := serverError(err); ok && code == erSpecificAccessDenied {
			say("cannot be seen replicating: user %q may not run %s (%v): GRANT SLAVE MONITOR ON *.* TO %s "+
				"(REPLICATION CLIENT before MariaDB 10.5; keyway's member monitor needs it too)", user, show, err, grantee(current))
		} else {
			say("cannot be checked: %s: %v", show, err)
		}
		return out
	}
	if len(conns) == 0 {
		say("is not replicating (%s is empty): point it at the primary %s with CHANGE MASTER TO … MASTER_USE_GTID = "+
			"slave_pos and START SLAVE, or remove it from replicas", show, g.Primary)
		return out
	}
	var saw []string
	for _, c := range conns {
		host, port := first(c, "Master_Host", "Source_Host"), first(c, "Master_Port", "Source_Port")
		id, _ := strconv.ParseUint(first(c, "Master_Server_Id", "Source_Server_Id"), 10, 64)
		if !fromPrimary(ctx, host, port, id, g, primary) {
			desc := net.JoinHostPort(host, port)
			if id != 0 {
				desc += fmt.Sprintf(" (server_id %d)", id)
			}
			saw = append(saw, desc)
			continue
		}
		name := ""
		if n := c["Connection_name"]; n != "" {
			name = fmt.Sprintf(" (connection %q)", n)
		}
		io, sqlThread := first(c, "Slave_IO_Running", "Replica_IO_Running"), first(c, "Slave_SQL_Running", "Replica_SQL_Running")
		if io != "Yes" || sqlThread != "Yes" {
			errs := ""
			for _, k := range []string{"Last_IO_Error", "Last_SQL_Error"} {
				if c[k] != "" {
					errs += "; " + k + ": " + c[k]
				}
			}
			say("is not applying the primary's writes%s: Slave_IO_Running = %s, Slave_SQL_Running = %s%s: it falls "+
				"behind the primary; fix the error and START SLAVE on it", name, io, sqlThread, errs)
		}
		if gtid, ok := c["Using_Gtid"]; ok && strings.EqualFold(gtid, "No") {
			say("replicates from the primary without GTIDs%s (Using_Gtid = No): keyway follows replicas' positions by "+
				"GTID; STOP SLAVE, CHANGE MASTER TO MASTER_USE_GTID = slave_pos, START SLAVE on it", name)
		}
		return out
	}
	want := g.Primary
	if primary.serverID != 0 {
		want += fmt.Sprintf(" (server_id %d)", primary.serverID)
	}
	say("replicates from %s, not from the group's primary %s: reads sent to it would not see the primary's writes; "+
		"point it at the primary (CHANGE MASTER TO MASTER_HOST, MASTER_PORT) or list it in its own primary's group",
		strings.Join(saw, ", "), want)
	return out
}

// erSpecificAccessDenied is ER_SPECIFIC_ACCESS_DENIED_ERROR: a statement needs a privilege the account lacks.
const erSpecificAccessDenied = 1227

// fromPrimary says whether a replication connection to host:port (whose server_id, when it has connected, is id)
// is one to the group's primary: the same server_id when both are known, else the same port and a host that is
// the primary's, ignoring case, or that resolves to one of the same addresses (loopback counts as one).
func fromPrimary(ctx context.Context, host, port string, id uint64, g config.Group, primary primaryID) bool {
	if id != 0 && primary.serverID != 0 {
		return id == primary.serverID
	}
	if g.PrimaryNetwork() == "unix" {
		// A socket names no host: only the port the primary listens on can be compared, and the host must be
		// this machine's.
		return primary.port != 0 && port == strconv.Itoa(primary.port) && sameHost(ctx, host, "localhost")
	}
	phost, pport, err := net.SplitHostPort(g.Primary)
	if err != nil {
		return false
	}
	pn, _ := strconv.Atoi(pport)
	rn, _ := strconv.Atoi(port)
	return pn == rn && sameHost(ctx, host, phost)
}

// sameHost compares two host names or addresses loosely: equal ignoring case, or resolving to a shared address, or
// both loopback.
func sameHost(ctx context.Context, a, b string) bool {
	if strings.EqualFold(a, b) {
		return true
	}
	as, bs := resolve(ctx, a), resolve(ctx, b)
	for _, x := range as {
		for _, y := range bs {
			if x.Equal(y) || x.IsLoopback() && y.IsLoopback() {
				return true
			}
		}
	}
	return false
}

func resolve(ctx context.Context, host string) []net.IP {
	if ip := net.ParseIP(host); ip != nil {
		return []net.IP{ip}
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil
	}
	var out []net.IP
	for _, a := range addrs {
		out = append(out, a.IP)
	}
	return out
}

// writesThroughReadOnly reads the account's global grants (its own and its current role's, from SHOW GRANTS) and
// returns the privilege that lets it write on a read_only server, and true; or "" and false; or, when SHOW GRANTS
// fails, why and false.
func writesThroughReadOnly(ctx context.Context, db *sql.DB, version string) (string, bool) {
	rows, err := db.QueryContext(ctx, "SHOW GRANTS")
	if err != nil {
		return "SHOW GRANTS: " + err.Error(), false
	}
	defer rows.Close()
	// SUPER carried READ ONLY ADMIN until MariaDB 10.11 split them; on MySQL SUPER passes read_only (only
	// super_read_only stops it).
	superPasses := !mariaDBAtLeast(version, 10, 11)
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "SHOW GRANTS: " + err.Error(), false
		}
		privs, ok := globalPrivileges(line)
		if !ok {
			continue
		}
		for _, p := range privs {
			switch p {
			case "ALL PRIVILEGES", "READ ONLY ADMIN":
				return p, true
			case "SUPER":
				if superPasses {
					return p, true
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return "SHOW GRANTS: " + err.Error(), false
	}
	return "", false
}

// globalPrivileges returns the privileges a SHOW GRANTS line grants on *.*, in upper case with MariaDB's
// "READ_ONLY ADMIN" spelt as its GRANT statement takes it ("READ ONLY ADMIN").
func globalPrivileges(line string) ([]string, bool) {
	rest, ok := strings.CutPrefix(line, "GRANT ")
	if !ok {
		return nil, false
	}
	list, _, ok := strings.Cut(rest, " ON *.* TO ")
	if !ok {
		return nil, false
	}
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.ToUpper(strings.TrimSpace(p))
		out = append(out, strings.ReplaceAll(p, "_", " "))
	}
	return out, true
}

// revocable is what a REVOKE names for priv.
func revocable(priv string) string {
	if priv == "ALL PRIVILEGES" {
		return "READ ONLY ADMIN"
	}
	return priv
}

// mariaDBAtLeast says whether version (SELECT VERSION()) is MariaDB major.minor or later.
func mariaDBAtLeast(version string, major, minor int) bool {
	if !strings.Contains(version, "MariaDB") {
		return false
	}
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && (ma > major || ma == major && mi >= minor)
}

// grantee spells CURRENT_USER() ("app@%") as GRANT takes it ('app'@'%').
func grantee(current string) string {
	user, host, ok := strings.Cut(current, "@")
	if !ok {
		return "'" + current + "'"
	}
	return "'" + user + "'@'" + host + "'"
}

// queryMaps runs q and returns its rows as column → value maps (NULL as "").
func queryMaps(ctx context.Context, db *sql.DB, q string) ([]map[string]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		m := make(map[string]string, len(cols))
		for i, c := range cols {
			m[c] = vals[i].String
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// first is the value of the first of keys that m has (MySQL 8 renamed Master_* to Source_*).
func first(m map[string]string, keys ...string) string {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v
		}
	}
	return ""
}

// replicaConfig is the group's go-sql-driver configuration (grp.SQLConfig) pointed at replica r and logged in as
// user: dialed directly (the group's own dial goes to its primary), with the group's TLS mode. With tls = "verify"
// and no tls_server_name, the name verified is the replica's host (the group's configuration verifies the
// primary's), or only the chain for a replica on a unix socket, as for a primary there.
func replicaConfig(grp *backend.Group, g config.Group, r config.Replica, user, password string) (*mysql.Config, error) {
	dc := grp.SQLConfig()
	dc.User, dc.Passwd = user, password
	dc.Net, dc.Addr = r.Network(), r.Address
	dc.DialFunc = nil
	if g.TLS == config.TLSVerify && g.TLSServerName == "" {
		name := ""
		if r.Network() == "tcp" {
			name, _, _ = net.SplitHostPort(r.Address)
		}
		tc, err := verifyingTLS(g.TLSCA, name)
		if err != nil {
			return nil, err
		}
		dc.TLS = tc
	}
	return dc, nil
}

// verifyingTLS verifies a server's chain against the PEM file ca (the system roots when "") and, when name is not
// "", that the certificate is for name.
func verifyingTLS(ca, name string) (*tls.Config, error) {
	var roots *x509.CertPool
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("tls_ca: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca %q holds no PEM certificate", ca)
		}
	}
	return &tls.Config{
		InsecureSkipVerify: true, // verified below, with or without a name
		MinVersion:         tls.VersionTLS12,
		ServerName:         name,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls = \"verify\": the server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, DNSName: name, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("tls = \"verify\": %w", err)
			}
			return nil
		},
	}, nil
}

// openDB is a database/sql pool on dc.
func openDB(dc *mysql.Config) (*sql.DB, error) {
	connector, err := mysql.NewConnector(dc)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(connector), nil
}

// unwrapUnavailable is err without backend's "unavailable" wrapping, as loginProblem shows it.
func unwrapUnavailable(err error) error {
	var ue *backend.UnavailableError
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

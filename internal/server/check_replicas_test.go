package server

import (
	"database/sql"
	"fmt"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/testenv"
)

// TestCheckReplicas: keyway check on a MariaDB primary with two GTID replicas. A healthy set checked with an
// account that cannot write through read_only gives no problem and no warning; a writable replica, an account that
// can write through read_only (app's ALL PRIVILEGES, READ ONLY ADMIN through a role; not SUPER on MariaDB 10.11), a
// stopped SQL thread, a replica of another server, a server that replicates from nothing, the primary listed as a
// replica, an unreachable replica and an account that may not see replication are each a warning naming the
// replica, never a problem.
func TestCheckReplicas(t *testing.T) {
	r := testenv.NewReplication(t, testenv.ReplicationOptions{})
	ctx := t.Context()
	p, a, b := r.Primary, r.Replicas[0], r.Replicas[1]
	rootExec(t, p.RootDSN,
		"CREATE USER 'sup'@'%' IDENTIFIED BY 'x'",
		"GRANT SELECT, SUPER ON *.* TO 'sup'@'%'",
		"CREATE ROLE writer",
		"GRANT READ ONLY ADMIN ON *.* TO writer",
		"CREATE USER 'viarole'@'%' IDENTIFIED BY 'x'",
		"GRANT SELECT ON *.* TO 'viarole'@'%'",
		"GRANT writer TO 'viarole'@'%'",
		"SET DEFAULT ROLE writer FOR 'viarole'@'%'",
		"CREATE USER 'mon'@'%' IDENTIFIED BY 'x'")
	if err := r.Sync(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, text string) []string {
		t.Helper()
		cfg, err := config.Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		problems, warnings := Check(ctx, cfg)
		if len(problems) > 0 {
			t.Errorf("problems (want none: replicas only warn):\n%s", strings.Join(problems, "\n"))
		}
		t.Logf("warnings:\n%s", strings.Join(warnings, "\n"))
		return warnings
	}
	group := func(user, password, primary string, replicas ...string) string {
		return fmt.Sprintf("[[groups]]\nname = \"main\"\nprimary = %q\nuser = %q\npassword = %q\nreplicas = [\"%s\"]\n",
			primary, user, password, strings.Join(replicas, `", "`))
	}

	t.Run("healthy, kw", func(t *testing.T) {
		if w := check(t, group("kw", "secret", p.Addr, a.Addr, b.Addr)); len(w) != 0 {
			t.Errorf("warnings on a healthy set checked as kw: %q", w)
		}
	})

	t.Run("accounts that write through read_only", func(t *testing.T) {
		w := check(t, group("app", "secret", p.Addr, a.Addr, b.Addr)+`
[sql]
listen = "127.0.0.1:0"
[[sql.users]]
name = "web"
password = "x"
backend_user = "sup"
backend_password = "x"
[[sql.users]]
name = "batch"
password = "x"
backend_user = "viarole"
backend_password = "x"
`)
		var want []string
		for _, m := range []*testenv.MariaDB{a, b} {
			want = append(want,
				fmt.Sprintf(`group "main": replica %s lets user "app" write through read_only: it holds ALL PRIVILEGES, so a write sent to the replica would be applied to it alone; keyway's accounts need neither: REVOKE READ ONLY ADMIN ON *.* FROM 'app'@'localhost' (for ALL PRIVILEGES, grant what keyway needs instead)`, m.Addr),
				fmt.Sprintf(`group "main": replica %s lets user "viarole" write through read_only: it holds READ ONLY ADMIN, so a write sent to the replica would be applied to it alone; keyway's accounts need neither: REVOKE READ ONLY ADMIN ON *.* FROM 'viarole'@'%%' (for ALL PRIVILEGES, grant what keyway needs instead)`, m.Addr))
		}
		// sup holds SUPER, which since MariaDB 10.11 no longer passes read_only: no warning. app matches
		// 'app'@'localhost' (MariaDB's test accounts have it beside 'app'@'%'), which the REVOKE names.
		if !reflect.DeepEqual(w, want) {
			t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(w, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("account without SLAVE MONITOR", func(t *testing.T) {
		w := check(t, group("mon", "x", p.Addr, a.Addr)+"invalidate = \"none\"\n")
		want := []string{`group "main": user "mon" may not read information_schema.INNODB_TRX on the primary (Error 1227 (42000): Access denied; you need (at least one of) the PROCESS privilege(s) for this operation): a switchover cannot see the writes in flight end and holds new writes for its whole hold; GRANT PROCESS ON *.* TO the account`,
			fmt.Sprintf(`group "main": replica %s cannot be seen replicating: user "mon" may not run SHOW ALL SLAVES STATUS (Error 1227 (42000): Access denied; you need (at least one of) the SUPER, SLAVE MONITOR privilege(s) for this operation): GRANT SLAVE MONITOR ON *.* TO 'mon'@'%%' (REPLICATION CLIENT before MariaDB 10.5; keyway's member monitor needs it too)`, a.Addr)}
		if !reflect.DeepEqual(w, want) {
			t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(w, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("writable replica", func(t *testing.T) {
		rootExec(t, a.RootDSN, "SET GLOBAL read_only = 0")
		defer rootExec(t, a.RootDSN, "SET GLOBAL read_only = 1")
		w := check(t, group("kw", "secret", p.Addr, a.Addr, b.Addr))
		want := []string{fmt.Sprintf(`group "main": replica %s is writable (read_only = OFF, MariaDB's default): a write sent to it would be applied to the replica alone; SET GLOBAL read_only = ON on it, and read_only = ON in its server configuration`, a.Addr)}
		if !reflect.DeepEqual(w, want) {
			t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(w, "\n"), strings.Join(want, "\n"))
		}
	})

	t.Run("stopped SQL thread", func(t *testing.T) {
		if err := b.StopSQLThread(ctx); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := b.StartSQLThread(ctx); err != nil {
				t.Fatal(err)
			}
		}()
		w := check(t, group("kw", "secret", p.Addr, a.Addr, b.Addr))
		if len(w) != 1 || !strings.HasPrefix(w[0], fmt.Sprintf(`group "main": replica %s is not applying the primary's writes: Slave_IO_Running = Yes, Slave_SQL_Running = No`, b.Addr)) {
			t.Errorf("warnings %q; want one: b is not applying the primary's writes", w)
		}
	})

	t.Run("wrong primary, primary listed, unreachable", func(t *testing.T) {
		down := freeAddr(t)
		// a as the group's primary: b replicates from p, not from a; p is writable and not replicating at all; a
		// under another name is the primary itself.
		localA := fmt.Sprintf("localhost:%d", a.Port)
		w := check(t, group("kw", "secret", a.Addr, b.Addr, p.Addr, localA, down))
		want := []string{
			fmt.Sprintf(`group "main": replica %s replicates from 127.0.0.1:%d (server_id 1), not from the group's primary %s (server_id 2): reads sent to it would not see the primary's writes; point it at the primary (CHANGE MASTER TO MASTER_HOST, MASTER_PORT) or list it in its own primary's group`, b.Addr, p.Port, a.Addr),
			fmt.Sprintf(`group "main": replica %s is writable (read_only = OFF, MariaDB's default): a write sent to it would be applied to the replica alone; SET GLOBAL read_only = ON on it, and read_only = ON in its server configuration`, p.Addr),
			fmt.Sprintf(`group "main": replica %s is not replicating (SHOW ALL SLAVES STATUS is empty): point it at the primary %s with CHANGE MASTER TO … MASTER_USE_GTID = slave_pos and START SLAVE, or remove it from replicas`, p.Addr, a.Addr),
			fmt.Sprintf(`group "main": replica %s is the group's primary itself (server_id 2, as the primary %s): remove it from replicas`, localA, a.Addr),
			fmt.Sprintf(`group "main": replica %s is unreachable: dial tcp %s: connect: connection refused`, down, down),
		}
		if !reflect.DeepEqual(w, want) {
			t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(w, "\n"), strings.Join(want, "\n"))
		}
	})
}

// freeAddr is a loopback address where nothing listens.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func rootExec(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

package sqlproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/testenv"
)

// queryAsync runs q on rc in the background; the channel yields its first column or its error.
func queryAsync(rc *rawClient, q string) <-chan string {
	out := make(chan string, 1)
	go func() {
		res, err := rc.query(q)
		if err != nil {
			out <- "error: " + err.Error()
			return
		}
		out <- strings.Join(res, ",")
	}()
	return out
}

// waitRunning waits until MariaDB shows a thread executing q.
func waitRunning(t *testing.T, q string) {
	t.Helper()
	db := testenv.SharedDB(t)
	waitFor(t, func() bool {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = ?", q).Scan(&n)
		return err == nil && n > 0
	})
}

func wantErrCode(t *testing.T, what string, err error, code uint16, msg string) {
	t.Helper()
	var me *mysqlwire.Error
	if !errors.As(err, &me) || me.Code != code || (msg != "" && me.Message != msg) {
		t.Fatalf("%s: want ERR %d %q, got %v", what, code, msg, err)
	}
}

// TestKillMapsSessionIDs: KILL through keyway names keyway's session ids (the ids clients got in the handshake,
// which the mariadb client's Ctrl-C sends on a new connection), acts on that session's own backend thread, and
// never reaches a backend thread by its MariaDB id nor another user's session.
func TestKillMapsSessionIDs(t *testing.T) {
	m := mariadb(t)
	// keyway ids far from MariaDB's thread ids: relayed unchanged, they could never hit a backend thread by luck.
	_, addr := startProxy(t, testConfig(m.Addr), func(s *Server) { s.connID.Store(1 << 30) })
	a := newRawClient(t, addr, "app", "secret", 0)
	b := newRawClient(t, addr, "app", "secret", mysqlwire.ClientMultiStatements)
	idle := newRawClient(t, addr, "app", "secret", 0)
	other := newRawClient(t, addr, "sha", "shapass", 0) // another keyway user, same backend user

	// A bystander talking to MariaDB directly, as the same backend user.
	direct, err := testenv.SharedDB(t).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	var bystanderID uint64
	if err := direct.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&bystanderID); err != nil {
		t.Fatal(err)
	}
	bystander := make(chan string, 1)
	go func() {
		var v string
		err := direct.QueryRowContext(context.Background(), "SELECT SLEEP(3) AS bystander").Scan(&v)
		bystander <- fmt.Sprintf("%s %v", v, err)
	}()
	waitRunning(t, "SELECT SLEEP(3) AS bystander")
	_, err = b.query(fmt.Sprintf("KILL QUERY %d", bystanderID))
	wantErrCode(t, "KILL QUERY of a backend thread id", err, mysqlwire.ERNoSuchThread, fmt.Sprintf("Unknown thread id: %d", bystanderID))

	aID := a.info.ConnectionID
	running := queryAsync(a, "SELECT SLEEP(30)")
	waitRunning(t, "SELECT SLEEP(30)")
	_, err = other.query(fmt.Sprintf("KILL QUERY %d", aID))
	wantErrCode(t, "KILL QUERY of another user's session", err, mysqlwire.ERNoSuchThread, fmt.Sprintf("Unknown thread id: %d", aID))
	_, err = b.query(fmt.Sprintf("KILL %d", aID+1000))
	wantErrCode(t, "KILL of no session", err, mysqlwire.ERNoSuchThread, fmt.Sprintf("Unknown thread id: %d", aID+1000))

	if _, err := b.query(fmt.Sprintf("/* ctrl-c */ kill   query %d ;", aID)); err != nil {
		t.Fatalf("KILL QUERY of the same user's session: %v", err)
	}
	select {
	case got := <-running:
		// MySQL has an interrupted SLEEP return 1; MariaDB answers ER_QUERY_INTERRUPTED.
		if got != "1" && !strings.HasPrefix(got, "error: ERROR 1317 (70100)") {
			t.Fatalf("killed SLEEP(30) returned %q, want 1 or ERR 1317 (interrupted)", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("KILL QUERY did not interrupt the session's query")
	}
	if res, err := a.query("SELECT 'after kill query'"); err != nil || len(res) != 1 {
		t.Fatalf("session after KILL QUERY: %v %v", res, err)
	}

	// KILL QUERY of an idle session is harmless.
	if _, err := b.query(fmt.Sprintf("KILL QUERY %d", idle.info.ConnectionID)); err != nil {
		t.Fatalf("KILL QUERY of an idle session: %v", err)
	}
	if res, err := idle.query("SELECT 'idle'"); err != nil || len(res) != 1 {
		t.Fatalf("idle session after KILL QUERY: %v %v", res, err)
	}

	// Forms keyway cannot map to one session are refused, not relayed.
	for _, q := range []string{"KILL USER app", "KILL HARD QUERY 5", "KILL QUERY CONNECTION_ID()", "SELECT 1; KILL QUERY 5"} {
		_, err := b.query(q)
		wantErrCode(t, q, err, mysqlwire.ERNotSupportedYet, "")
	}

	// KILL cannot be prepared: an execute would carry the id as a parameter keyway does not map.
	if err := b.c.WriteCommand(0x16 /* COM_STMT_PREPARE */, []byte("KILL QUERY ?")); err != nil {
		t.Fatal(err)
	}
	if p, err := b.c.ReadPacket(); err != nil || parseErr(p) == nil || parseErr(p).Code != mysqlwire.ERUnsupportedPS {
		t.Fatalf("COM_STMT_PREPARE of KILL: want ERR 1295, got %q %v", p, err)
	}

	// KILL CONNECTION ends the session.
	if _, err := b.query(fmt.Sprintf("KILL CONNECTION %d", aID)); err != nil {
		t.Fatalf("KILL CONNECTION: %v", err)
	}
	if res, err := a.query("SELECT 'still here'"); err == nil {
		t.Fatalf("session after KILL CONNECTION answered %v", res)
	}

	t.Log("waiting for bystander")
	if got := <-bystander; got != "0 <nil>" {
		t.Fatalf("the bystander's SLEEP(3) returned %q, want 0: its query was killed through keyway", got)
	}
}

// TestMariaDBCLICtrlC: Ctrl-C in the mariadb client (SIGINT) sends KILL QUERY <the id keyway gave it> on a second
// connection; through keyway that interrupts the client's own query.
func TestMariaDBCLICtrlC(t *testing.T) {
	testenv.Need(t, "mariadb")
	cli, err := testenv.LookPath("mariadb")
	if err != nil {
		t.Fatal(err)
	}
	m := mariadb(t)
	_, addr := startProxy(t, testConfig(m.Addr), func(s *Server) { s.connID.Store(1 << 30) })
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(cli, "--no-defaults", "-h", host, "-P", port, "-u", "app", "-psecret", "--skip-ssl",
		"-N", "-e", "SELECT SLEEP(20) AS ctrl_c")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	waitRunning(t, "SELECT SLEEP(20) AS ctrl_c")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(8 * time.Second):
		t.Fatalf("Ctrl-C did not interrupt the query: %s", out.String())
	}
	if s := out.String(); !strings.Contains(s, "Query execution was interrupted") && strings.TrimSpace(s) != "1" {
		t.Fatalf("after Ctrl-C the client printed %q", s)
	}
}

// TestSessionIDsUnique: when the 32-bit connection id wraps, keyway skips 0 and ids still in use, so a KILL can
// never name two sessions.
func TestSessionIDsUnique(t *testing.T) {
	m := mariadb(t)
	s, addr := startProxy(t, testConfig(m.Addr), func(s *Server) { s.connID.Store(1<<32 - 2) })
	a := newRawClient(t, addr, "app", "secret", 0)
	b := newRawClient(t, addr, "app", "secret", 0)
	s.connID.Store(0)
	c := newRawClient(t, addr, "app", "secret", 0)
	if ids := []uint32{a.info.ConnectionID, b.info.ConnectionID, c.info.ConnectionID}; ids[0] != 1<<32-1 || ids[1] != 1 || ids[2] != 2 {
		t.Fatalf("ids %v, want [4294967295 1 2]", ids)
	}
}

// TestKillFollowsTheLease: KILL QUERY of a session that runs no statement touches no backend connection, even the
// one its last statement ran on, which another session now runs a statement on.
func TestKillFollowsTheLease(t *testing.T) {
	m := mariadb(t)
	s, addr := startProxy(t, testConfig(m.Addr))
	idle := newRawClient(t, addr, "app", "secret", 0)
	if _, err := idle.query("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	waitAllIdle(t, s)
	busy := newRawClient(t, addr, "app", "secret", 0) // the same pool: it borrows the connection idle used last
	const q = "SELECT SLEEP(1) + 7"
	res := queryAsync(busy, q)
	waitRunning(t, q)
	killer := newRawClient(t, addr, "app", "secret", 0)
	if _, err := killer.query(fmt.Sprintf("KILL QUERY %d", idle.info.ConnectionID)); err != nil {
		t.Fatalf("KILL QUERY of an idle session: %v", err)
	}
	if got := <-res; got != "7" {
		t.Fatalf("another session's statement on the connection the idle one used last: %q, want 7 (not killed)", got)
	}
}

package sqlproxy

import (
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/testenv"
)

// holdOne makes one of a pool's connections busy: a session that opened a transaction keeps its connection. The
// pool hands out its most recently used idle connection first, so holding it sends the next statement to another.
// The holder negotiates what like (the same pool); it waits first for the sessions of s to give their connections
// back (a session gives its connection back just after its reply went out, so a client may be quicker).
func holdOne(t *testing.T, s *Server, addr string, like *rawClient) func() {
	t.Helper()
	waitAllIdle(t, s)
	h := newRawClientExt(t, addr, "app", "secret", like.c.Capabilities&mysqlwire.ProtocolCaps, like.c.ExtCapabilities)
	if _, err := h.query("BEGIN"); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := h.query("COMMIT"); err != nil {
			t.Error(err)
		}
		h.c.Close()
	}
}

// waitAllIdle waits until no connection of s's pools is borrowed.
func waitAllIdle(t *testing.T, s *Server) {
	t.Helper()
	waitFor(t, func() bool {
		for _, st := range s.opts.Topology.Stats() {
			if st.InUse > 0 {
				return false
			}
		}
		return true
	})
}

func TestPreparedOnAnotherConnection(t *testing.T) {
	m := mariadb(t)
	direct := open(t, "app", "secret", m.Addr, "")
	mustExec(t, direct, "DROP TABLE IF EXISTS ps_move")
	mustExec(t, direct, "CREATE TABLE ps_move (id INT PRIMARY KEY, c VARCHAR(10))")
	mustExec(t, direct, "INSERT INTO ps_move VALUES (1, 'one'), (2, 'two'), (3, 'three')")
	cfg := testConfig(m.Addr)
	cfg.Groups[0].MaxOpen = 2
	s, addr := startProxy(t, cfg)

	t.Run("types bound once", func(t *testing.T) {
		a := newRawClient(t, addr, "app", "secret", 0)
		id := a.prepareStmt("SELECT c FROM ps_move WHERE id = ?")
		if got := a.executeOne(executeInt(id, 1, true)); !strings.Contains(got, "one") {
			t.Fatalf("first execute: %q", got)
		}
		release := holdOne(t, s, addr, a) // the connection a prepared and executed on
		if got := a.executeOne(executeInt(id, 2, false)); !strings.Contains(got, "two") {
			t.Fatalf("untyped execute on a connection that never saw the statement: %q", got)
		}
		release()
		release = holdOne(t, s, addr, a) // now the other one
		if got := a.executeOne(executeInt(id, 3, false)); !strings.Contains(got, "three") {
			t.Fatalf("untyped execute back on the first connection: %q", got)
		}
		release()
	})

	t.Run("metadata cache and DDL", func(t *testing.T) {
		mustExec(t, direct, "DROP TABLE IF EXISTS ps_ddl")
		mustExec(t, direct, "CREATE TABLE ps_ddl (id INT PRIMARY KEY, c VARCHAR(10))")
		mustExec(t, direct, "INSERT INTO ps_ddl VALUES (1, 'one')")
		for _, ext := range []uint32{0, mysqlwire.MariaCacheMetadata} {
			mustExec(t, direct, "ALTER TABLE ps_ddl DROP COLUMN IF EXISTS d")
			a := newRawClientExt(t, addr, "app", "secret", 0, ext)
			id := a.prepareStmt("SELECT * FROM ps_ddl WHERE id = ?")
			if a.executeOne(executeInt(id, 1, true)); a.lastCols != 2 {
				t.Fatalf("ext %#x: %d columns, want 2", ext, a.lastCols)
			}
			if a.executeOne(executeInt(id, 1, false)); ext != 0 && a.lastDefs {
				t.Errorf("ext %#x: the definitions came again though nothing changed", ext)
			}
			mustExec(t, direct, "ALTER TABLE ps_ddl ADD COLUMN d INT DEFAULT 7")
			release := holdOne(t, s, addr, a) // the execute goes to the connection that never saw the statement
			got := a.executeOne(executeInt(id, 1, false))
			release()
			if a.lastCols != 3 || !a.lastDefs || !strings.Contains(got, "one") {
				t.Fatalf("ext %#x: after the DDL, on another connection: %d columns, definitions %v, row %q; want 3 with definitions",
					ext, a.lastCols, a.lastDefs, got)
			}
			// Back on the first connection, where the server re-prepares and says so itself.
			release = holdOne(t, s, addr, a)
			a.executeOne(executeInt(id, 1, false))
			release()
			if a.lastCols != 3 {
				t.Fatalf("ext %#x: on the first connection after the DDL: %d columns", ext, a.lastCols)
			}
			// The server sends them on a statement's first execute on a connection; after that, not again.
			waitAllIdle(t, s)
			a.executeOne(executeInt(id, 1, false))
			if a.executeOne(executeInt(id, 1, false)); ext != 0 && a.lastDefs {
				t.Errorf("ext %#x: the definitions came again after the client had them", ext)
			}
		}
	})
}

// TestPHPPreparedAcrossConnections: PHP's PDO (emulation off) and mysqli prepare statements, send long data and
// execute them while other sessions take turns on a pool of 2 connections, so executes keep landing on connections
// that never saw the prepare; every answer is right.
func TestPHPPreparedAcrossConnections(t *testing.T) {
	testenv.NeedPHPModules(t, "mysqli", "pdo_mysql")
	m := mariadb(t)
	direct := open(t, "app", "secret", m.Addr, "")
	mustExec(t, direct, "DROP TABLE IF EXISTS ps_php")
	mustExec(t, direct, "CREATE TABLE ps_php (id INT PRIMARY KEY, c VARCHAR(20), blobby BLOB)")
	mustExec(t, direct, "INSERT INTO ps_php SELECT seq, CONCAT('row ', seq), NULL FROM seq_1_to_50")
	cfg := testConfig(m.Addr)
	cfg.Groups[0].MaxOpen = 2
	_, addr := startProxy(t, cfg)
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command("php", "-r", phpPrepared, host, port).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok 30") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// phpPrepared (host port as arguments) prints "ok N" after N rounds that all answered right.
const phpPrepared = `
[$host, $port] = [$argv[1], (int)$argv[2]];
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
$dsn = "mysql:host=$host;port=$port;dbname=test";
$opts = [PDO::ATTR_EMULATE_PREPARES => false, PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION];
$pdo = new PDO($dsn, "app", "secret", $opts);
$other = new PDO($dsn, "app", "secret", $opts);
$my = new mysqli($host, "app", "secret", "test", $port);
$sel = $pdo->prepare("SELECT c FROM ps_php WHERE id = ?");
$upd = $my->prepare("UPDATE ps_php SET blobby = ? WHERE id = ?");
$get = $my->prepare("SELECT LENGTH(blobby), c FROM ps_php WHERE id = ?");
$ok = 0;
for ($i = 1; $i <= 30; $i++) {
	$other->query("SELECT $i")->fetchAll();          // another session between prepare and each execute
	$sel->execute([$i]);
	$c = $sel->fetchColumn();
	$sel->closeCursor();
	$other->beginTransaction();                       // holds a connection while the others execute
	$null = null;
	$upd->bind_param("bi", $null, $i);
	$upd->send_long_data(0, str_repeat("x", 1000 + $i));
	$upd->execute();
	$get->bind_param("i", $i);
	$get->execute();
	$get->bind_result($len, $c2);
	$get->fetch();
	$get->free_result();
	$other->commit();
	if ($c === "row $i" && $len === 1000 + $i && $c2 === "row $i") { $ok++; } else { echo "round $i: $c $len $c2\n"; }
}
echo "ok $ok\n";
`

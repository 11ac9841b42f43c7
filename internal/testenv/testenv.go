// Package testenv binds the private servers of package peers (memcached, MariaDB, a MariaDB primary with GTID
// replicas, the keyway binary) to a test's life: the New* helpers start one and register its Stop with t.Cleanup,
// SharedMariaDB gives a test binary one MariaDB, the certificate helpers write throwaway TLS material, and a few helpers serve connection-level
// tests (ConnPair, Relay: a backend a test can take away, ThreadReads). It is the only package of the project
// that imports "testing" outside _test files, and only tests import it; the shipped binary (keyway bench) uses
// package peers directly.
//
// Invariants:
//   - A missing program is a failure naming the Debian package that provides it (Need calls t.Fatalf), never a
//     skip.
//   - Everything a helper starts is stopped at the test's cleanup; an unexpected exit fails the test there. A
//     member of a Replication the test killed (MariaDB.Kill, Shutdown) is an expected exit.
package testenv

import (
	"context"
	"database/sql"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/keywaydb/keyway/internal/peers"
)

// The servers and their starters, as package peers defines them.
type (
	Process        = peers.Process
	MariaDB        = peers.MariaDB
	MariaDBOptions = peers.MariaDBOptions
	Memcached      = peers.Memcached

	Replication        = peers.Replication
	ReplicationOptions = peers.ReplicationOptions
	GTIDPositions      = peers.GTIDPositions
)

// KeywayBinaryEnv names the variable that points tests at a prebuilt keyway.
const KeywayBinaryEnv = peers.KeywayBinaryEnv

var (
	LookPath          = peers.LookPath
	FreePort          = peers.FreePort
	WaitForPort       = peers.WaitForPort
	KeywayBinary      = peers.KeywayBinary
	StartKeyway       = peers.StartKeyway
	StartKeywayBinary = peers.StartKeywayBinary
	StartMariaDB      = peers.StartMariaDB
	StartMariaDBWith  = peers.StartMariaDBWith
	StartMemcached    = peers.StartMemcached
	StartReplication  = peers.StartReplication
)

// sharedMariaDB is one MariaDB for all the tests of a test binary that ask
// for it with SharedMariaDB; StopSharedMariaDB (from TestMain) ends it.
var sharedMariaDB struct {
	once sync.Once
	m    *MariaDB
	err  error
}

// Need fails the test (t.Fatalf, never t.Skip) when command is missing,
// naming the Debian package that provides it.
func Need(t testing.TB, command string) {
	t.Helper()
	if _, err := LookPath(command); err != nil {
		t.Fatalf("%v", err)
	}
}

// NeedPHPModules fails the test (never skips) unless php is installed with every one of mods (as `php -m` names
// them: mysqli, pdo_mysql, memcached), naming the Debian package that provides it.
func NeedPHPModules(t testing.TB, mods ...string) {
	t.Helper()
	Need(t, "php")
	out, err := exec.Command("php", "-m").Output()
	if err != nil {
		t.Fatalf("php -m: %v", err)
	}
	for _, mod := range mods {
		if !strings.Contains(string(out), "\n"+mod+"\n") {
			pkg := "php-mysql"
			if mod == "memcached" {
				pkg = "php-memcached"
			}
			t.Fatalf("php has no %s: install the Debian package %s (apt-get install -y %s), or run `make test`", mod, pkg, pkg)
		}
	}
}

// NewKeyway builds keyway if needed, starts `keyway serve` for the test and
// stops it at cleanup; an unexpected exit or a slow graceful stop fails the
// test there.
func NewKeyway(t testing.TB, args ...string) *Process {
	t.Helper()
	p, err := StartKeyway(context.Background(), args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return p
}

// NewMariaDB starts a private MariaDB for the test and stops it (removing
// its directory) at cleanup. It fails the test when MariaDB is missing or
// does not start.
func NewMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	return NewMariaDBWith(t, MariaDBOptions{})
}

// NewMariaDBWith is NewMariaDB with options: a private server for the test, stopped at cleanup.
func NewMariaDBWith(t testing.TB, o MariaDBOptions) *MariaDB {
	t.Helper()
	Need(t, "mariadb-install-db")
	Need(t, "mariadbd")
	m, err := StartMariaDBWith(context.Background(), o)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return m
}

// NewReplication starts a MariaDB primary with GTID replicas for the test (see peers.Replication) and stops every
// member at cleanup. It fails the test when MariaDB is missing or replication does not start.
func NewReplication(t testing.TB, o ReplicationOptions) *Replication {
	t.Helper()
	Need(t, "mariadb-install-db")
	Need(t, "mariadbd")
	r, err := StartReplication(context.Background(), o)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return r
}

// SharedMariaDB returns the test binary's shared MariaDB, starting it on
// first use. Tests sharing it must use their own tables. Call
// StopSharedMariaDB from TestMain after m.Run.
func SharedMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	Need(t, "mariadbd")
	Need(t, "mariadb-install-db")
	sharedMariaDB.once.Do(func() {
		sharedMariaDB.m, sharedMariaDB.err = StartMariaDB(context.Background())
	})
	if sharedMariaDB.err != nil {
		t.Fatalf("%v", sharedMariaDB.err)
	}
	return sharedMariaDB.m
}

// StopSharedMariaDB stops the shared MariaDB if one was started.
func StopSharedMariaDB() {
	if sharedMariaDB.m != nil {
		_ = sharedMariaDB.m.Stop()
	}
}

// RunWithSharedMariaDB is a test binary's TestMain body for packages that use
// SharedMariaDB: it runs the tests, stops the shared MariaDB and returns the
// exit code (os.Exit(testenv.RunWithSharedMariaDB(m))).
func RunWithSharedMariaDB(m *testing.M) int {
	code := m.Run()
	StopSharedMariaDB()
	return code
}

// SharedDB is a database/sql pool on the shared MariaDB as the app user
// (database test), closed when the test ends.
func SharedDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", SharedMariaDB(t).AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// NewMemcached starts a private memcached for the test and stops it at cleanup. It
// fails the test when memcached is missing or does not start.
func NewMemcached(t testing.TB, extraArgs ...string) *Memcached {
	t.Helper()
	Need(t, "memcached")
	m, err := StartMemcached(context.Background(), extraArgs...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return m
}

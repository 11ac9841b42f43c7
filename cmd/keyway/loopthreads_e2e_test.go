package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestLoopThreadsOnlyWithoutSQLDoor: with the SQL door off, the memcache door's event loops keep threads of their
// own and keyway gives the runtime one P more than GOMAXPROCS asked for (memcache stats "threads"); with the SQL
// door on, keyway runs on GOMAXPROCS as asked. Either way the door answers.
func TestLoopThreadsOnlyWithoutSQLDoor(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2") // the keyway processes inherit it
	check := func(t *testing.T, addr, want string) {
		t.Helper()
		c := dialText(t, addr)
		if line, _ := c.do("set k 0 0 1", "x"); line != "STORED" {
			t.Fatalf("set: %q", line)
		}
		if line, data := c.do("get k"); line != "VALUE k 0 1" || data != "x" {
			t.Fatalf("get: %q %q", line, data)
		}
		if got := statsOf(t, addr)["threads"]; got != want {
			t.Fatalf("stats threads %q, want %q", got, want)
		}
	}
	t.Run("sql door off", func(t *testing.T) {
		kw := testenv.NewKeyway(t)
		check(t, kw.Addr, "3")
	})
	t.Run("sql door on", func(t *testing.T) {
		m := testenv.NewMariaDB(t)
		sqlAddr := freeAddr(t)
		path := filepath.Join(t.TempDir(), "keyway.toml")
		cfg := fmt.Sprintf("[sql]\nlisten = %q\n\n[[sql.users]]\nname = \"app\"\npassword = \"secret\"\n\n"+
			"[[groups]]\nname = \"main\"\nprimary = %q\nuser = \"app\"\npassword = \"secret\"\n", sqlAddr, m.Addr)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		kw := startKeywaySQL(t, sqlAddr, "--config", path)
		check(t, kw.Addr, "2")
	})
}

package main

// keyway stats, one-shot, against a keyway serving both doors and a container in front of a private MariaDB.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

func TestStatsOnce(t *testing.T) {
	m := testenv.NewMariaDB(t)
	rootExec(t, m.RootDSN, "CREATE TABLE test.kv (k VARCHAR(64) PRIMARY KEY, v TEXT)")
	kw, sqlAddr, adminAddr := serveSQLAdmin(t, m.Addr, `invalidate = "none"`, kvContainer)
	// Traffic: one set, a hit and a miss on the memcache door; two logins and two statements on the SQL door.
	mc := memcache.New(kw.Addr)
	if err := mc.Set(&memcache.Item{Key: "@@kv.a", Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Get("@@kv.a"); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Get("@@kv.nope"); err != memcache.ErrCacheMiss {
		t.Fatalf("get of a missing key: %v", err)
	}
	mc.Close() // connections are counted when open; closed, the figure is settled
	for range 2 {
		if n := login(t, sqlAddr, "app", "secret"); n != 0 {
			t.Fatalf("login: error %d", n)
		}
	}

	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"keyway at " + adminAddr,
		"memcache   " + kw.Addr + "  connections 0  items 1  memory N of 64.0 MiB  evictions 0",
		"           gets 2  hits 50.0%  sets 1",
		"store      memory only (nothing kept across a restart)",
		"group      main  " + m.Addr + "  up",
		"sql        " + sqlAddr + "  connections 0  queries 2",
		"  pool     main  app  open N  idle N  in_use 0  waits 0  errors 0",
		"container  kv  test.kv  checked  get caching  set caching  write sync  batches 1  rows 1",
		"",
	}, "\n")
	// --once, and no flag: stdout is a pipe here, so the view is one snapshot either way.
	for _, args := range [][]string{{"--once"}, nil} {
		// A session of either door ends (a SQL session's backend connection back in the pool) shortly after its
		// client left.
		eventually(t, fmt.Sprintf("keyway stats %v", args), func() (bool, string) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin, append([]string{"stats", "--admin", adminAddr}, args...)...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("keyway stats %v: %v\n%s", args, err, stderr.String())
			}
			// Memory figures depend on the item's overhead: they are checked for form only.
			got := regexp.MustCompile(`memory \d+(\.\d)? [KMG]?i?B of 64\.0 MiB`).ReplaceAllString(stdout.String(), "memory N of 64.0 MiB")
			// The two logins may overlap their backend connections (one or two pooled): checked for form, and that
			// every one is idle again.
			got = regexp.MustCompile(`open [12]  idle [12]  in_use 0`).ReplaceAllString(got, "open N  idle N  in_use 0")
			return got == want, fmt.Sprintf("\n%s\nwant:\n%s", got, want)
		})
	}
}

// TestStatsPoolsApart: the mariadb CLI and PHP mysqli negotiate different protocol flags, so the SQL door keeps a
// backend pool for each; keyway stats says what tells the two apart instead of printing two identical lines.
func TestStatsPoolsApart(t *testing.T) {
	testenv.Need(t, "mariadb")
	testenv.Need(t, "php")
	m := testenv.NewMariaDB(t)
	_, sqlAddr, adminAddr := serveSQLAdmin(t, m.Addr, `invalidate = "none"`, "")
	host, port, _ := strings.Cut(sqlAddr, ":")
	if out, err := mariadbCLI(t, "-h", host, "-P", port, "-uapp", "-psecret", "-e", "SELECT 1"); err != nil {
		t.Fatalf("mariadb: %v\n%s", err, out)
	}
	php := fmt.Sprintf(`$c = mysqli_connect(%q, "app", "secret", "", %s); echo $c->query("SELECT 1")->fetch_row()[0];`, host, port)
	if out, err := exec.Command("php", "-r", php).CombinedOutput(); err != nil || string(out) != "1" {
		t.Fatalf("php mysqli: %v\n%s", err, out)
	}
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	var pools []string
	eventually(t, "two pools in keyway stats", func() (bool, string) {
		out, err := exec.Command(bin, "stats", "--once", "--admin", adminAddr).CombinedOutput()
		if err != nil {
			t.Fatalf("keyway stats: %v\n%s", err, out)
		}
		pools = pools[:0]
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "  pool     main  app  ") {
				pools = append(pools, l)
			}
		}
		return len(pools) == 2, string(out)
	})
	// The CLI asks for multi-statements, mysqli does not: that, at least, tells them apart, one way each.
	plus, minus := 0, 0
	for _, l := range pools {
		switch {
		case strings.Contains(l, "  +") && strings.Contains(l, " +MULTI_STATEMENTS"):
			plus++
		case strings.Contains(l, "  -") && strings.Contains(l, " -MULTI_STATEMENTS"):
			minus++
		}
	}
	if pools[0] == pools[1] || plus != 1 || minus != 1 {
		t.Fatalf("pool lines:\n%s\nwant one with +MULTI_STATEMENTS and one with -MULTI_STATEMENTS", strings.Join(pools, "\n"))
	}
	t.Logf("pool lines:\n%s", strings.Join(pools, "\n"))
}

// serveSQLAdmin starts keyway serve with the admin listener, the SQL door (user app, password secret) and group main
// (account app) on primary; groupKeys are added to the group's table and more after it. It waits for the admin
// listener and the SQL door, and returns keyway and their addresses.
func serveSQLAdmin(t *testing.T, primary, groupKeys, more string) (kw *testenv.Process, sqlAddr, adminAddr string) {
	t.Helper()
	sqlAddr, adminAddr = freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
[admin]
listen = %q

[sql]
listen = %q

[[sql.users]]
name = "app"
password = "secret"

[[groups]]
name = "main"
primary = %q
user = "app"
password = "secret"
%s
%s`, adminAddr, sqlAddr, primary, groupKeys, more)), 0o600); err != nil {
		t.Fatal(err)
	}
	kw = testenv.NewKeyway(t, "--config", path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range []string{sqlAddr, adminAddr} {
		if err := testenv.WaitForPort(ctx, a); err != nil {
			t.Fatalf("%s: %v\n%s", a, err, kw.Output())
		}
	}
	return kw, sqlAddr, adminAddr
}

// kvContainer is a [[containers]] table for test.kv (k, v) on group main.
const kvContainer = `
[[containers]]
name = "kv"
table = "test.kv"
key = "k"
values = ["v"]
`

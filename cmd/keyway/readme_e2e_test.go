package main

// The README's quick starts, run as written against a private MariaDB with
// its binlog on. Each block the README marks with
//
//	<!-- quickstart: NAME KIND -->
//
// before a fenced block is one step of quick start NAME, run in the order the
// README gives them, in one working directory (bin/keyway is the keyway under
// test; keyway.toml and ./data are the files the README names):
//
//   - serve: each line is run; `make build` is already done, `make run` runs
//     the Makefile's own recipe, and a `bin/keyway serve …` line starts keyway
//     (stopping the one running, as Ctrl-C would) and waits for its listeners;
//   - client: the block is run by bash, and must succeed;
//   - sql: the block is fed to the mariadb client as root (`sudo mariadb`);
//   - toml: the block is keyway.toml, or is added to it when it exists;
//   - mycnf: a my.cnf section cannot be set while the server runs, so each of
//     its lines must be what the test server runs with (SELECT @@GLOBAL.name).
//
// The only changes to the README's text are the addresses: memcached's, MariaDB's
// and the SQL door's fixed ports become the test's, and `sudo mariadb` becomes
// the mariadb client as root on the test server's socket.

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// quickStartBlock is one marked fenced block of the README.
type quickStartBlock struct {
	name, kind string
	line       int // the marker's line, for messages
	text       string
}

var quickStartMarker = regexp.MustCompile(`^<!-- quickstart: (\S+) (\S+) -->$`)

// readmeQuickStarts returns the README's marked blocks in order; a marker not followed by a fenced block is an
// error.
func readmeQuickStarts(t *testing.T, path string) []quickStartBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []quickStartBlock
	for i := 0; i < len(lines); i++ {
		m := quickStartMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("README line %d: a quickstart marker must be followed by a fenced block", i+1)
		}
		b := quickStartBlock{name: m[1], kind: m[2], line: i + 1}
		j := i + 2
		for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			b.text += lines[j] + "\n"
		}
		if j == len(lines) {
			t.Fatalf("README line %d: the fenced block does not end", i+1)
		}
		out = append(out, b)
		i = j
	}
	return out
}

// quickStartRun is the working directory, the servers and the keyway the quick starts share.
type quickStartRun struct {
	t        *testing.T
	dir      string
	maria    *testenv.MariaDB
	sub      *strings.Replacer
	mcAddr   string
	sqlAddr  string
	keyway   *exec.Cmd
	exited   chan error
	output   *bytes.Buffer
	rootArgs []string // the mariadb client as root on the test server
}

// TestReadmeQuickStarts runs every quick start of README.md as written (see the file comment): the persistent
// memcached keeps its item across a restart, the container reads and writes the table, and the SQL door's
// writes are seen through both doors, with the binlog follower fresh under the README's grants.
func TestReadmeQuickStarts(t *testing.T) {
	for _, c := range []string{"bash", "mariadb", "memccat"} {
		testenv.Need(t, c)
	}
	blocks := readmeQuickStarts(t, "../../README.md")
	names := map[string]bool{}
	for _, b := range blocks {
		names[b.name] = true
	}
	for _, want := range []string{"persistent", "container", "sqldoor"} {
		if !names[want] {
			t.Fatalf("README has no quick start %q (markers: <!-- quickstart: %s KIND -->)", want, want)
		}
	}

	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	r := &quickStartRun{t: t, dir: t.TempDir(), maria: testenv.NewMariaDB(t), mcAddr: freeAddr(t), sqlAddr: freeAddr(t)}
	if err := os.Mkdir(filepath.Join(r.dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(r.dir, "bin", "keyway")); err != nil {
		t.Fatal(err)
	}
	_, mcPort, _ := net.SplitHostPort(r.mcAddr)
	_, sqlPort, _ := net.SplitHostPort(r.sqlAddr)
	r.rootArgs = []string{"mariadb", "--no-defaults", "-u", "root", "-S", r.maria.Socket}
	r.sub = strings.NewReplacer(
		"/dev/tcp/127.0.0.1/11211", "/dev/tcp/127.0.0.1/"+mcPort,
		"127.0.0.1:11211", r.mcAddr,
		"127.0.0.1:3306", r.maria.Addr,
		"127.0.0.1:3307", r.sqlAddr,
		"-P 3307", "-P "+sqlPort,
		"sudo mariadb", strings.Join(r.rootArgs, " "),
	)
	t.Cleanup(r.stop)

	// What each quick start's client blocks must print, in order.
	expect := map[string][][]string{
		"persistent": {{"STORED", "VALUE greeting 0 5\r\nhello\r\nEND"}, {"hello"}},
		"container":  {{"STORED", "greeting\thello", "42"}},
		"sqldoor":    {{"42", "43", "cache_state{group=main}"}},
	}
	clients := map[string]int{}
	for _, b := range blocks {
		where := fmt.Sprintf("quick start %q, README line %d (%s)", b.name, b.line, b.kind)
		text := r.sub.Replace(b.text)
		switch b.kind {
		case "serve":
			r.serve(where, text)
			if b.name == "sqldoor" {
				r.waitFresh(where)
			}
		case "client":
			out := r.bash(where, text)
			n := clients[b.name]
			clients[b.name]++
			if n >= len(expect[b.name]) {
				t.Fatalf("%s: no expectation for client block %d; add one to the test", where, n+1)
			}
			for _, want := range expect[b.name][n] {
				if !strings.Contains(out, want) {
					t.Errorf("%s: output lacks %q:\n%s", where, want, out)
				}
			}
		case "sql":
			cmd := exec.Command(r.rootArgs[0], r.rootArgs[1:]...)
			cmd.Stdin = strings.NewReader(text)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", where, err, out)
			}
		case "toml":
			f, err := os.OpenFile(filepath.Join(r.dir, "keyway.toml"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteString("\n" + text)
			if err := errors.Join(err, f.Close()); err != nil {
				t.Fatal(err)
			}
		case "mycnf":
			r.checkMyCnf(where, text)
		default:
			t.Fatalf("%s: unknown kind %q (serve, client, sql, toml, mycnf)", where, b.kind)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	for name, want := range expect {
		if clients[name] != len(want) {
			t.Errorf("quick start %q: %d client blocks, the test expects %d", name, clients[name], len(want))
		}
	}
}

// serve runs a serve block's lines: `make build` is done already, `make run` is the Makefile's recipe, a
// `bin/keyway serve` line (re)starts keyway, anything else runs in bash and must succeed.
func (r *quickStartRun) serve(where, text string) {
	t := r.t
	for _, line := range strings.Split(text, "\n") {
		cmdline := strings.TrimSpace(line)
		if i := strings.Index(cmdline, "#"); i >= 0 {
			cmdline = strings.TrimSpace(cmdline[:i])
		}
		switch {
		case cmdline == "" || cmdline == "make build":
		case cmdline == "make run":
			r.start(where, r.makeRun(where))
		case strings.HasPrefix(cmdline, "bin/keyway serve"):
			r.start(where, strings.Fields(cmdline))
		default:
			r.bash(where, line)
		}
	}
	if r.keyway == nil {
		t.Fatalf("%s: a serve block that starts no keyway", where)
	}
}

// makeRun is the Makefile's run recipe as an argv, with ARGS the memcache door's test port (as
// `make run ARGS='-p PORT'` would give it).
func (r *quickStartRun) makeRun(where string) []string {
	t := r.t
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	inRun := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "run:") {
			inRun = true
			continue
		}
		if inRun && strings.HasPrefix(line, "\t") {
			_, port, _ := net.SplitHostPort(r.mcAddr)
			recipe := strings.NewReplacer("./$(BIN)", "bin/keyway", "$(ARGS)", "-p "+port).Replace(strings.TrimSpace(line))
			return strings.Fields(recipe)
		}
	}
	t.Fatalf("%s: the Makefile has no run recipe", where)
	return nil
}

// start stops the running keyway (SIGINT, as Ctrl-C) and starts argv in the working directory, waiting until the
// memcache door (and the SQL door, when keyway.toml has one) accept connections.
func (r *quickStartRun) start(where string, argv []string) {
	t := r.t
	r.stop()
	r.output = &bytes.Buffer{}
	r.keyway = exec.Command(filepath.Join(r.dir, argv[0]), argv[1:]...)
	r.keyway.Dir = r.dir
	r.keyway.Stdout, r.keyway.Stderr = r.output, r.output
	if err := r.keyway.Start(); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	r.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan error) { exited <- cmd.Wait() }(r.keyway, r.exited)
	addrs := []string{r.mcAddr}
	if cfg, err := os.ReadFile(filepath.Join(r.dir, "keyway.toml")); err == nil && bytes.Contains(cfg, []byte("[sql]")) &&
		strings.Contains(strings.Join(argv, " "), "keyway.toml") {
		addrs = append(addrs, r.sqlAddr)
	}
	for _, a := range addrs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := testenv.WaitForPort(ctx, a)
		cancel()
		if err != nil {
			t.Fatalf("%s: keyway %v does not listen on %s: %v\n%s", where, argv, a, err, r.output)
		}
	}
}

// stop ends the running keyway as Ctrl-C does; a keyway that does not stop within 10s fails the test.
func (r *quickStartRun) stop() {
	if r.keyway == nil {
		return
	}
	_ = r.keyway.Process.Signal(syscall.SIGINT)
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		_ = r.keyway.Process.Kill()
		<-r.exited
		r.t.Errorf("keyway did not stop within 10s of SIGINT\n%s", r.output)
	}
	r.keyway = nil
}

// bash runs script in the working directory and returns its output; a failing command fails the test.
func (r *quickStartRun) bash(where, script string) string {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		keywayOut := ""
		if r.output != nil {
			keywayOut = r.output.String()
		}
		t.Fatalf("%s: %v\n%s\n--- script:\n%s--- keyway:\n%s", where, err, out, script, keywayOut)
	}
	return string(out)
}

// checkMyCnf checks that each setting of a my.cnf block is what the test server runs with: a bare name means ON.
func (r *quickStartRun) checkMyCnf(where, text string) {
	t := r.t
	db, err := sql.Open("mysql", r.maria.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		name, want, ok := strings.Cut(line, "=")
		name = strings.ReplaceAll(strings.TrimSpace(name), "-", "_")
		want = strings.TrimSpace(want)
		if !ok {
			want = "1"
		}
		if !regexp.MustCompile(`^[a-z_]+$`).MatchString(name) {
			t.Fatalf("%s: %q is not a server variable", where, line)
		}
		var got string
		if err := db.QueryRow("SELECT @@GLOBAL." + name).Scan(&got); err != nil {
			t.Fatalf("%s: %s: %v", where, line, err)
		}
		if !strings.EqualFold(got, want) && !(want == "1" && strings.EqualFold(got, "ON")) {
			t.Errorf("%s: the README asks for %q; the test server runs with %s = %s (internal/peers/mariadb.go)",
				where, line, name, got)
		}
	}
}

// waitFresh waits until SHOW KEYWAY CACHE through the SQL door, as the quick start's application account, says
// group main is fresh: the binlog follower runs with the README's grants.
func (r *quickStartRun) waitFresh(where string) {
	t := r.t
	db, err := sql.Open("mysql", "shop:shop-secret@tcp("+r.sqlAddr+")/shop")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(20 * time.Second)
	state := ""
	for time.Now().Before(deadline) {
		rows, err := db.Query("SHOW KEYWAY CACHE")
		if err == nil {
			for rows.Next() {
				var name, v string
				if rows.Scan(&name, &v) == nil && name == "cache_state{group=main}" {
					state = v
				}
			}
			rows.Close()
		} else {
			state = err.Error()
		}
		if state == "fresh" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: group main never became fresh: %s\n%s", where, state, r.output)
}

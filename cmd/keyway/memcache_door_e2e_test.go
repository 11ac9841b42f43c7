package main

// End-to-end tests of the memcache door's configuration: turning it off,
// TLS and authentication, with the real binary and real clients.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

// startKeywayConfig runs `keyway serve --config <toml>` (no -l/-p, so the file
// alone decides the memcache door) and waits until waitAddr accepts. It stops
// keyway at cleanup.
func startKeywayConfig(t *testing.T, toml, waitAddr string) *exec.Cmd {
	t.Helper()
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "serve", "--config", cfg)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("keyway did not stop within 10s\n%s", out.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("keyway exited before %s accepted: %v\n%s", waitAddr, err, out.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", waitAddr, 250*time.Millisecond); err == nil {
			c.Close()
			return cmd
		}
		if ctx.Err() != nil {
			t.Fatalf("keyway: %s never accepted\n%s", waitAddr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listeningPorts returns the TCP ports process pid listens on, read from
// /proc: its socket inodes matched to the LISTEN entries of /proc/net/tcp{,6}.
func listeningPorts(t *testing.T, pid int) map[int]bool {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot read the process's descriptors: %v", err)
	}
	inodes := make(map[string]bool)
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	ports := make(map[int]bool)
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			_, portHex, _ := strings.Cut(f[1], ":")
			b, err := hex.DecodeString(portHex)
			if err != nil || len(b) != 2 {
				t.Fatalf("%s: cannot read %q", table, f[1])
			}
			ports[int(b[0])<<8|int(b[1])] = true
		}
	}
	return ports
}

// listen = "" turns the memcache door off: keyway opens no memcache port at
// all (only the admin listener), and /status and /metrics still answer.
// Before, listen = "" was rejected as an invalid address and keyway did not
// start.
func TestMemcacheDoorOff(t *testing.T) {
	adminPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	admin := net.JoinHostPort("127.0.0.1", strconv.Itoa(adminPort))
	cmd := startKeywayConfig(t, `
[memcache]
listen = ""
[admin]
listen = "`+admin+`"
`, admin)
	ports := listeningPorts(t, cmd.Process.Pid)
	if len(ports) != 1 || !ports[adminPort] {
		t.Fatalf("keyway listens on ports %v; want only the admin port %d", ports, adminPort)
	}
	for _, path := range []string{"/status", "/metrics"} {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
		}
		if path == "/status" {
			var st struct {
				Memcache struct {
					Listen *string `json:"listen"`
				} `json:"memcache"`
			}
			if err := json.Unmarshal(body, &st); err != nil || st.Memcache.Listen == nil || *st.Memcache.Listen != "" {
				t.Errorf("GET /status = %s (%v); want the memcache door's listen empty", body, err)
			}
		}
	}
}

// freeAddr is a free loopback host:port.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// memcache.tls_cert and tls_key serve the door over TLS: gomemcache with a
// tls.Dialer sets and gets; plain gomemcache to the same port fails. Before,
// the keys were unknown and keyway did not start.
func TestMemcacheTLSConfig(t *testing.T) {
	cert, key := testenv.SelfSignedCert(t, t.TempDir())
	addr := freeAddr(t)
	startKeywayConfig(t, `
[memcache]
listen = "`+addr+`"
tls_cert = "`+cert+`"
tls_key = "`+key+`"
`, addr)
	mc := memcache.New(addr)
	dialer := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}
	mc.DialContext = dialer.DialContext
	mc.Timeout = 5 * time.Second
	if err := mc.Set(&memcache.Item{Key: "k", Value: []byte("over tls"), Flags: 7}); err != nil {
		t.Fatalf("set over TLS: %v", err)
	}
	it, err := mc.Get("k")
	if err != nil || string(it.Value) != "over tls" || it.Flags != 7 {
		t.Fatalf("get over TLS: %+v, %v", it, err)
	}
	plain := memcache.New(addr)
	plain.Timeout = 2 * time.Second
	if it, err := plain.Get("k"); err == nil {
		t.Fatalf("plain TCP to the TLS port got %q; want an error", it.Value)
	}
}

// memcache.auth_file (memcached's -Y format) turns authentication on: a text
// client must send the auth "set" first, and php-memcached authenticates
// with SASL (binary protocol) through setSaslAuthData. Before, the key was
// unknown and keyway did not start.
func TestMemcacheAuthConfig(t *testing.T) {
	dir := t.TempDir()
	authFile := filepath.Join(dir, "auth")
	if err := os.WriteFile(authFile, []byte("app:pa55word\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	startKeywayConfig(t, `
[memcache]
listen = "`+addr+`"
auth_file = "`+authFile+`"
`, addr)

	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	for _, step := range []struct{ send, want string }{
		{"get k\r\n", "CLIENT_ERROR unauthenticated\r\n"},
		{"set k 0 0 9\r\napp wrong\r\n", "CLIENT_ERROR authentication failure\r\n"},
		{"set k 0 0 12\r\napp pa55word\r\n", "STORED\r\n"},
		{"set k 0 0 4\r\ntext\r\n", "STORED\r\n"},
	} {
		if _, err := io.WriteString(nc, step.send); err != nil {
			t.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != step.want {
			t.Fatalf("sent %q: got %q, %v; want %q", step.send, got, err, step.want)
		}
	}

	testenv.Need(t, "php")
	if out, err := exec.Command("php", "-r", `exit(class_exists("Memcached") ? 0 : 1);`).CombinedOutput(); err != nil {
		t.Skipf("php-memcached is not installed: %v %s", err, out)
	}
	host, port, _ := net.SplitHostPort(addr)
	script := `
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->addServer($argv[1], (int)$argv[2]);
$m->setSaslAuthData($argv[3], $argv[4]);
$v = $m->get("k");
if ($v === false) { echo "get failed: ", $m->getResultCode(), " ", $m->getResultMessage(), "\n"; exit(1); }
if (!$m->set("php", "from php")) { echo "set failed: ", $m->getResultMessage(), "\n"; exit(1); }
echo $v, "|", $m->get("php"), "\n";
`
	run := func(password string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "php", "-r", script, "--", host, port, "app", password).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	out, err := run("pa55word")
	if err != nil || out != "text|from php" {
		t.Fatalf("php-memcached with SASL: %q, %v; want %q", out, err, "text|from php")
	}
	out, err = run("wrong")
	if err == nil || !strings.Contains(out, "get failed") {
		t.Fatalf("php-memcached with a wrong password: %q, %v; want the get to fail", out, err)
	}
	t.Logf("php-memcached with a wrong password: %s", out)
}

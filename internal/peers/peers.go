// Package peers starts private, real servers — memcached, MariaDB (alone, or a primary with GTID replicas),
// haproxy and the keyway binary itself — as child processes: the peers keyway is measured against and tested
// with. For replication it also plays the operator: kill, restart, delay, promote and repoint a member. `keyway bench` uses it directly; tests use it
// through package testenv, which ties each server to a test's life.
//
// Invariants:
//   - No fixed ports: every server listens on a loopback port picked by FreePort, and a start that loses the race
//     for that port is retried on a new one.
//   - Every child runs in its own process group (and dies with its parent via Pdeathsig); Stop and Kill signal the
//     whole group, so nothing outlives its owner.
//   - Temporary directories a server owns (MariaDB's data directory) are removed when it stops (Stop); a MariaDB
//     that was killed or shut down to be started again keeps its directory until then.
//   - A missing program is an error naming the Debian package that provides it.
//   - Library code returns errors; it never panics, never calls os.Exit and does not import "testing", so it
//     can ship in the keyway binary.
package peers

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// debianPackages names the Debian package that provides each command the
// tests and benchmarks run.
var debianPackages = map[string]string{
	"memcached":          "memcached",
	"memcaslap":          "libmemcached-tools",
	"memccapable":        "libmemcached-tools",
	"memcstat":           "libmemcached-tools",
	"mariadbd":           "mariadb-server",
	"mariadb-install-db": "mariadb-server",
	"mariadb":            "mariadb-client",
	"mysql":              "mariadb-client",
	"sysbench":           "sysbench",
	"php":                "php-cli",
	"go":                 "golang-go",
	"make":               "make",
	"haproxy":            "haproxy",
	"systemd-analyze":    "systemd",
}

// sbinDirs are searched after $PATH: mariadbd lives in /usr/sbin, which an
// unprivileged user's $PATH often lacks.
var sbinDirs = []string{"/usr/sbin", "/usr/local/sbin", "/sbin"}

// LookPath finds command in $PATH or the sbin directories. The error names
// the Debian package that provides the command.
func LookPath(command string) (string, error) {
	if p, err := exec.LookPath(command); err == nil {
		return p, nil
	}
	if !strings.Contains(command, "/") {
		for _, dir := range sbinDirs {
			p := filepath.Join(dir, command)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	if pkg, ok := debianPackages[command]; ok {
		return "", fmt.Errorf("peers: %q not found in $PATH or %s: install the Debian package %s (apt-get install -y %s), or run `make test`, which installs it",
			command, strings.Join(sbinDirs, ", "), pkg, pkg)
	}
	return "", fmt.Errorf("peers: %q not found in $PATH or %s: install it", command, strings.Join(sbinDirs, ", "))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another
// process may take it before the caller binds it; the Start functions retry on
// a new port when that happens.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("peers: find a free loopback port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("peers: find a free loopback port: %w", err)
	}
	return port, nil
}

// WaitForPort waits until addr accepts a TCP connection or ctx is done.
func WaitForPort(ctx context.Context, addr string) error {
	return waitAccept(ctx, "tcp", addr, nil)
}

// waitAccept polls until network/addr accepts a connection. It gives up early
// when p (if not nil) exits, since then nothing will ever listen.
func waitAccept(ctx context.Context, network, addr string, p *Process) error {
	d := net.Dialer{Timeout: 250 * time.Millisecond}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			return c.Close()
		}
		var exited <-chan struct{}
		if p != nil {
			exited = p.done
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("peers: %s %s does not accept connections: %w (last error: %v)", network, addr, ctx.Err(), err)
		case <-exited:
			return fmt.Errorf("peers: %s exited before %s %s accepted connections: %v", p.name, network, addr, p.waitErr)
		case <-tick.C:
		}
	}
}

// Process is a server running as a child process in its own process group.
// Stop or Kill it exactly when done; both are safe to call more than once.
type Process struct {
	Cmd  *exec.Cmd
	Addr string // "127.0.0.1:port" the server listens on
	Port int

	name string
	out  *tailBuffer // stdout and stderr, last tailMax bytes

	done    chan struct{} // closed once Cmd.Wait has returned
	waitErr error         // Cmd.Wait's result; read only after done is closed

	mu       sync.Mutex
	signaled bool // Stop or Kill was called
}

// Output returns the tail of the process's combined stdout and stderr.
func (p *Process) Output() string { return p.out.String() }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// stopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
const stopGrace = 5 * time.Second

// Stop sends SIGTERM to the process group, waits up to 5s, then SIGKILLs it.
// It returns an error when the process had exited before anyone asked it to
// (a crash) or ignored SIGTERM for 5s (a broken graceful stop).
func (p *Process) Stop() error { return p.terminate(true) }

// Kill SIGKILLs the process group and waits for the process, as a crash
// would. It returns an error only when the process had already exited on its
// own.
func (p *Process) Kill() error { return p.terminate(false) }

func (p *Process) terminate(graceful bool) error {
	p.mu.Lock()
	first := !p.signaled
	p.signaled = true
	p.mu.Unlock()

	// Whatever happens below, leave no member of the group behind.
	defer p.signalGroup(syscall.SIGKILL)

	if p.Exited() {
		if first {
			return fmt.Errorf("peers: %s exited unexpectedly (%v)%s", p.name, p.waitErr, outputTail(p.out))
		}
		return nil
	}
	if !graceful {
		p.signalGroup(syscall.SIGKILL)
		<-p.done
		return nil
	}
	p.signalGroup(syscall.SIGTERM)
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
		p.signalGroup(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("peers: %s did not exit within %v of SIGTERM and was killed%s", p.name, stopGrace, outputTail(p.out))
	}
}

func (p *Process) signalGroup(sig syscall.Signal) {
	if p.Cmd.Process == nil {
		return
	}
	// Negative pid: the process group, which Setpgid made equal to the pid.
	// ESRCH (already gone) is the expected outcome after an exit.
	_ = syscall.Kill(-p.Cmd.Process.Pid, sig)
}

// startProcess starts path with args in a new process group, its output
// captured, and a goroutine reaping it. The process lives until Stop or Kill;
// no context governs its lifetime.
func startProcess(name, path string, args ...string) (*Process, error) {
	cmd := exec.Command(path, args...)
	out := newTailBuffer()
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If the test binary dies without cleanup (timeout panic, SIGKILL),
		// the kernel kills the server too.
		Pdeathsig: syscall.SIGKILL,
	}
	// A grandchild holding the output pipe must not block Wait forever.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("peers: start %s: %w", name, err)
	}
	p := &Process{Cmd: cmd, name: name, out: out, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// bindAttempts is how many ports a server start tries before giving up.
const bindAttempts = 4

// isBindRace reports whether a failed start looks like another process took
// the port between FreePort and the server's bind.
func isBindRace(text string) bool {
	t := strings.ToLower(text)
	return strings.Contains(t, "address already in use") ||
		strings.Contains(t, "bind on tcp/ip port")
}

// startOnFreePort starts the server at path, which listens on the port its command line names (args builds the
// command line for a port), and waits up to timeout for it to accept connections. A start that lost the port to
// another process between FreePort and its bind is retried on a new port, up to bindAttempts times.
func startOnFreePort(ctx context.Context, name, path string, timeout time.Duration, args func(port int) ([]string, error)) (*Process, error) {
	var lastErr error
	for attempt := 0; attempt < bindAttempts; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		argv, err := args(port)
		if err != nil {
			return nil, err
		}
		p, err := startProcess(name, path, argv...)
		if err != nil {
			return nil, err
		}
		p.Addr, p.Port = listenAddr(port), port
		wctx, cancel := context.WithTimeout(ctx, timeout)
		err = waitAccept(wctx, "tcp", p.Addr, p)
		cancel()
		if err == nil {
			return p, nil
		}
		_ = p.Kill()
		lastErr = fmt.Errorf("peers: start %s %v: %w%s", name, argv, err, outputTail(p.out))
		if !isBindRace(p.Output()) || ctx.Err() != nil {
			return nil, lastErr
		}
	}
	return nil, lastErr
}

// listenAddr formats a loopback address for port.
func listenAddr(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// tailMax bounds the captured output of a child process.
const tailMax = 64 << 10

// tailBuffer keeps the last tailMax bytes written to it. It is safe for
// concurrent use (os/exec copies stdout and stderr from two goroutines).
type tailBuffer struct {
	mu      sync.Mutex
	buf     []byte
	dropped bool
}

func newTailBuffer() *tailBuffer { return &tailBuffer{} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - tailMax; over > 0 {
		n := copy(b.buf, b.buf[over:])
		b.buf = b.buf[:n]
		b.dropped = true
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped {
		return "…" + string(b.buf)
	}
	return string(b.buf)
}

// errTailBytes is how much captured output an error message carries.
const errTailBytes = 4 << 10

// outputTail formats the last errTailBytes of b for an error message, or ""
// when nothing was captured.
func outputTail(b *tailBuffer) string {
	return formatTail("output", b.String())
}

func formatTail(what, s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) > errTailBytes {
		s = "…" + s[len(s)-errTailBytes:]
	}
	return "\n--- " + what + " ---\n" + s
}

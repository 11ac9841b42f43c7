package peers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// HAProxy is a real haproxy in TCP mode relaying a free loopback port to one backend: the plain relay the SQL door
// is measured against (a proxy that adds nothing but a hop).
type HAProxy struct {
	Addr string // "127.0.0.1:port", the relay's front
	Port int

	proc *Process
	dir  string
}

// haproxyStartTimeout bounds how long StartHAProxy waits for the port.
const haproxyStartTimeout = 15 * time.Second

// haproxyConfig is a minimal TCP relay: no health checks (they would show in the backend's connection counts), no
// logging, timeouts long enough for any benchmark's idle connections, and maxconn above any client count used here.
const haproxyConfig = `global
    maxconn 4096
    nbthread %d
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
frontend front
    bind 127.0.0.1:%d
    default_backend back
backend back
    server s1 %s
`

// StartHAProxy starts haproxy relaying a free loopback port to backend ("host:port") with threads worker threads
// (0: one per CPU, as haproxy's default) and waits until it accepts connections. ctx bounds the start only.
func StartHAProxy(ctx context.Context, backend string, threads int) (*HAProxy, error) {
	path, err := LookPath("haproxy")
	if err != nil {
		return nil, err
	}
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	dir, err := os.MkdirTemp("", "keyway-haproxy-")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	// -db: stay in the foreground, so the process is ours to stop.
	p, err := startOnFreePort(ctx, "haproxy", path, haproxyStartTimeout, func(port int) ([]string, error) {
		return []string{"-db", "-f", cfg}, os.WriteFile(cfg, fmt.Appendf(nil, haproxyConfig, threads, port, backend), 0o600)
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &HAProxy{Addr: p.Addr, Port: p.Port, proc: p, dir: dir}, nil
}

// Stop terminates haproxy and removes its configuration. It is safe to call more than once.
func (h *HAProxy) Stop() error {
	err := h.proc.Stop()
	os.RemoveAll(h.dir)
	return err
}

// Process returns the underlying child process.
func (h *HAProxy) Process() *Process { return h.proc }

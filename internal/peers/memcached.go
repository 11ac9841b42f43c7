package peers

import (
	"context"
	"os"
	"strconv"
	"time"
)

// Memcached is a real memcached 1.6 listening on a free loopback port.
type Memcached struct {
	Addr string // "127.0.0.1:port"
	Port int

	proc *Process
}

// memcachedStartTimeout bounds how long StartMemcached waits for the port.
const memcachedStartTimeout = 15 * time.Second

// StartMemcached starts memcached on 127.0.0.1 and a free port and waits
// until it accepts connections. extraArgs are appended to the command line
// (for example "-m", "1024"); they must not set -l, -p or -U. ctx bounds the
// start only; the server runs until Stop.
func StartMemcached(ctx context.Context, extraArgs ...string) (*Memcached, error) {
	path, err := LookPath("memcached")
	if err != nil {
		return nil, err
	}
	p, err := startOnFreePort(ctx, "memcached", path, memcachedStartTimeout, func(port int) ([]string, error) {
		args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0"}
		if os.Geteuid() == 0 {
			// memcached refuses to run as root without an explicit -u.
			args = append(args, "-u", "root")
		}
		return append(args, extraArgs...), nil
	})
	if err != nil {
		return nil, err
	}
	return &Memcached{Addr: p.Addr, Port: p.Port, proc: p}, nil
}

// Stop terminates memcached (SIGTERM, then SIGKILL after 5s). It is safe to
// call more than once.
func (m *Memcached) Stop() error { return m.proc.Stop() }

// Process returns the underlying child process (for Kill in crash tests).
func (m *Memcached) Process() *Process { return m.proc }

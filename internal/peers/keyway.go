package peers

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// keywayPackage is the import path KeywayBinary builds.
const keywayPackage = "github.com/keywaydb/keyway/cmd/keyway"

// KeywayBinaryEnv names an environment variable that, when set, is the path
// of a prebuilt keyway binary KeywayBinary returns instead of building one.
const KeywayBinaryEnv = "KEYWAY_BINARY"

var keywayBuild struct {
	once sync.Once
	path string
	err  error
}

// KeywayBinary builds cmd/keyway once per process and returns the binary's
// path. The module root is found by walking up from the working directory to
// go.mod. The binary goes to one fixed directory per user and checkout under os.TempDir()
// (replaced atomically), so repeated test runs leave one file behind, not one
// per run. $KEYWAY_BINARY, when set, is returned instead.
func KeywayBinary() (string, error) {
	keywayBuild.once.Do(func() {
		keywayBuild.path, keywayBuild.err = buildKeyway()
	})
	return keywayBuild.path, keywayBuild.err
}

const keywayBuildTimeout = 5 * time.Minute

func buildKeyway() (string, error) {
	if p := os.Getenv(KeywayBinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("peers: $%s: %w", KeywayBinaryEnv, err)
		}
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	goCmd, err := goTool()
	if err != nil {
		return "", err
	}
	// One directory per checkout: test runs of two checkouts at once (worktrees, CI beside a session) must not
	// start each other's binary.
	dir := filepath.Join(os.TempDir(), "keyway-testenv-"+strconv.Itoa(os.Getuid()), fmt.Sprintf("%x", sha256.Sum256([]byte(root)))[:16])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("peers: make build dir: %w", err)
	}
	final := filepath.Join(dir, "keyway")
	// Build to a unique name, then rename: test binaries of several packages
	// build concurrently, and a running keyway keeps its old inode.
	tmp := filepath.Join(dir, fmt.Sprintf("keyway.%d.%d.tmp", os.Getpid(), time.Now().UnixNano()))

	ctx, cancel := context.WithTimeout(context.Background(), keywayBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", tmp, keywayPackage)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("peers: go build %s (in %s): %w%s", keywayPackage, root, err, formatTail("output", string(out)))
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("peers: install built keyway: %w", err)
	}
	return final, nil
}

// moduleRoot walks up from the working directory to the directory holding
// go.mod.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("peers: working directory: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("peers: no go.mod above %s: run from inside the keyway module or set $%s", wd, KeywayBinaryEnv)
		}
		dir = parent
	}
}

// goTool finds the go command: $PATH, then $GOROOT/bin, then /usr/local/go.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	var tried []string
	if gr := os.Getenv("GOROOT"); gr != "" {
		tried = append(tried, filepath.Join(gr, "bin", "go"))
	}
	tried = append(tried, "/usr/local/go/bin/go")
	for _, p := range tried {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("peers: the go command is not in $PATH, $GOROOT/bin or /usr/local/go/bin: install Go or set $" + KeywayBinaryEnv)
}

// keywayStartTimeout bounds the wait for keyway's memcache port.
const keywayStartTimeout = 30 * time.Second

// StartKeyway runs `keyway serve -l 127.0.0.1 -p <free port> args...` with
// the binary from KeywayBinary and waits until the port accepts TCP
// connections. ctx bounds the start only; the server runs until Stop or Kill.
func StartKeyway(ctx context.Context, args ...string) (*Process, error) {
	bin, err := KeywayBinary()
	if err != nil {
		return nil, err
	}
	return StartKeywayBinary(ctx, bin, args...)
}

// StartKeywayBinary is StartKeyway with an explicit binary path (for example
// the running executable, when `keyway bench` starts servers).
func StartKeywayBinary(ctx context.Context, bin string, args ...string) (*Process, error) {
	var lastErr error
	for attempt := 0; attempt < bindAttempts; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		argv := append([]string{"serve", "-l", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)
		p, err := startProcess("keyway", bin, argv...)
		if err != nil {
			return nil, err
		}
		p.Addr, p.Port = listenAddr(port), port
		wctx, cancel := context.WithTimeout(ctx, keywayStartTimeout)
		err = waitAccept(wctx, "tcp", p.Addr, p)
		cancel()
		if err == nil {
			return p, nil
		}
		_ = p.Kill()
		lastErr = fmt.Errorf("peers: %s %v: %w%s", bin, argv, err, outputTail(p.out))
		if !isBindRace(p.Output()) || ctx.Err() != nil {
			return nil, lastErr
		}
	}
	return nil, lastErr
}

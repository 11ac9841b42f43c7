package bench

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/peers"
)

// Machine is where a benchmark ran: what a reader needs to judge the figures and to reproduce them.
type Machine struct {
	CPUs      int    // runtime.NumCPU: the CPUs this process may use
	CPUModel  string `json:",omitempty"` // /proc/cpuinfo's "model name"
	Kernel    string // /proc/sys/kernel/osrelease
	Go        string // the Go toolchain keyway was built with
	Keyway    string // `keyway version`
	Memcached string // `memcached -V`
	MariaDB   string // `mariadbd --version`
	Sysbench  string // `sysbench --version`
	Memcaslap string // `memcaslap --version`
	When      time.Time
}

// notInstalled is what a version reads when the command is missing or fails.
const notInstalled = "not installed"

// CollectMachine describes this machine; keyway is the binary whose version is asked (empty: none known).
func CollectMachine(ctx context.Context, keyway string) Machine {
	m := Machine{
		CPUs:      runtime.NumCPU(),
		CPUModel:  cpuModel(),
		Kernel:    strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		Go:        runtime.Version(),
		Memcached: commandVersion(ctx, "memcached", "-V"),
		MariaDB:   commandVersion(ctx, "mariadbd", "--version"),
		Sysbench:  commandVersion(ctx, "sysbench", "--version"),
		Memcaslap: commandVersion(ctx, "memcaslap", "--version"),
		When:      time.Now().UTC().Truncate(time.Second),
	}
	m.Keyway = notInstalled
	if keyway != "" {
		m.Keyway = runVersion(ctx, keyway, "version")
	}
	return m
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// commandVersion runs command (found as the benchmarks find it) with args and returns the first line it prints.
func commandVersion(ctx context.Context, command string, args ...string) string {
	path, err := peers.LookPath(command)
	if err != nil {
		return notInstalled
	}
	return runVersion(ctx, path, args...)
}

func runVersion(ctx context.Context, path string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil || line == "" {
		return notInstalled
	}
	return strings.TrimSpace(line)
}

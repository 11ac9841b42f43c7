// Command memcompare measures what a million small items cost in memory: it loads the same items into keyway
// binaries and into memcached 1.6 with the same memory limit, one after the other, and reports each process's RSS
// (from /proc/PID/status) after the load, the items held and the load time; for keyway also after a restart (the
// items come back from its data_dir). It is a measurement, not a test: run it by hand, alone on the machine
// (flock /tmp/bench.lock go run ./scripts/memcompare -keyway ./keyway).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	var keyways multiFlag
	flag.Var(&keyways, "keyway", "a keyway binary to measure, as label=path or path (repeatable)")
	memcached := flag.String("memcached", "memcached", "the memcached binary (empty: skip)")
	items := flag.Int("items", 1_000_000, "items to load")
	valueSize := flag.Int("value", 100, "value bytes")
	mb := flag.Int("m", 320, "memory limit in MiB for every server")
	memoryOnly := flag.Bool("memory-only", false, "run keyway without a data_dir as well")
	flag.Parse()
	fmt.Printf("%d items, 13-byte keys, %d-byte values, memory limit %d MiB\n\n", *items, *valueSize, *mb)
	fmt.Printf("%-22s %10s %10s %12s %10s %10s\n", "server", "RSS MiB", "HWM MiB", "items held", "load s", "B/item")
	for _, k := range keyways {
		label, path, ok := strings.Cut(k, "=")
		if !ok {
			label, path = "keyway", k
		}
		dir, err := os.MkdirTemp("", "memcompare")
		check(err)
		args := []string{"serve", "-l", "127.0.0.1", "-m", strconv.Itoa(*mb), "--data-dir", dir}
		p := start(path, args, dir)
		r := load(p, *items, *valueSize)
		report(label+" (async)", p, r, *items)
		stop(p)
		began := time.Now()
		p = start(path, args, dir)
		took := time.Since(began)
		report(label+" restarted", p, result{took: took}, *items)
		stop(p)
		os.RemoveAll(dir)
		if *memoryOnly {
			p = start(path, args[:len(args)-2], "")
			r = load(p, *items, *valueSize)
			report(label+" (memory)", p, r, *items)
			stop(p)
		}
	}
	if *memcached != "" {
		args := []string{"-l", "127.0.0.1", "-m", strconv.Itoa(*mb), "-U", "0"}
		if os.Getuid() == 0 {
			args = append(args, "-u", "root") // memcached refuses to run as root without it
		}
		p := start(*memcached, args, "")
		r := load(p, *items, *valueSize)
		report("memcached", p, r, *items)
		stop(p)
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

type proc struct {
	cmd  *exec.Cmd
	addr string
}

type result struct{ took time.Duration }

func start(bin string, args []string, dir string) *proc {
	port := freePort()
	args = append(args, "-p", strconv.Itoa(port))
	cmd := exec.Command(bin, args...)
	logName := filepath.Join(os.TempDir(), "memcompare-"+filepath.Base(bin)+".log")
	if dir != "" {
		logName = filepath.Join(dir, "log")
	}
	log, err := os.Create(logName)
	check(err)
	cmd.Stdout, cmd.Stderr = log, log
	check(cmd.Start())
	p := &proc{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	for deadline := time.Now().Add(60 * time.Second); ; {
		c, err := net.Dial("tcp", p.addr)
		if err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			panic(fmt.Sprintf("%s does not listen on %s (log %s)", bin, p.addr, logName))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stop(p *proc) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// load sets n items over one connection, pipelined in batches with noreply, each batch ended by mn so the client
// waits for the server as a set without noreply would every batch.
func load(p *proc, n, valueSize int) result {
	c, err := net.Dial("tcp", p.addr)
	check(err)
	defer c.Close()
	w := bufio.NewWriterSize(c, 256<<10)
	r := bufio.NewReader(c)
	value := strings.Repeat("v", valueSize)
	began := time.Now()
	const batch = 500
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, "set key:%09d 0 0 %d noreply\r\n%s\r\n", i, valueSize, value)
		if i%batch == batch-1 || i == n-1 {
			w.WriteString("mn\r\n")
			check(w.Flush())
			line, err := r.ReadString('\n')
			check(err)
			if line != "MN\r\n" {
				panic("after a batch of sets: " + line)
			}
		}
	}
	return result{took: time.Since(began)}
}

func report(label string, p *proc, r result, n int) {
	time.Sleep(2 * time.Second) // let a collection or a commit round pass
	held := stat(p, "curr_items")
	rss, hwm := procStatus(p.cmd.Process.Pid, "VmRSS"), procStatus(p.cmd.Process.Pid, "VmHWM")
	perItem := "-"
	if held > 0 {
		perItem = strconv.FormatInt(rss<<10/held, 10)
	}
	fmt.Printf("%-22s %10.1f %10.1f %12d %10.2f %10s\n", label, float64(rss)/1024, float64(hwm)/1024, held, r.took.Seconds(), perItem)
}

// stat reads one general stat from the server.
func stat(p *proc, name string) int64 {
	c, err := net.Dial("tcp", p.addr)
	check(err)
	defer c.Close()
	fmt.Fprintf(c, "stats\r\n")
	r := bufio.NewReader(c)
	var v int64
	for {
		line, err := r.ReadString('\n')
		check(err)
		if line == "END\r\n" {
			return v
		}
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == name {
			v, _ = strconv.ParseInt(f[2], 10, 64)
		}
	}
}

// procStatus reads a kB field of /proc/PID/status.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	check(err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			v, _ := strconv.ParseInt(f[0], 10, 64)
			return v
		}
	}
	return 0
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}

// Command keyway is fast, consistent access to MySQL data: a memcache door
// (memcached's protocols, on a persistent local store and on MySQL tables
// through containers) and a SQL door (a MySQL-protocol proxy with a consistent
// result cache). Subcommands: serve, check, stats, bench, version. The
// end-to-end tests of the whole binary live here too (*_e2e_test.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/memcache"
	"github.com/keywaydb/keyway/internal/server"
)

// version is keyway's own version, set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

const usage = `keyway — fast, consistent access to MySQL data

usage:
  keyway serve [flags]          serve the memcache and SQL doors (keyway serve -h for flags)
  keyway check [flags]          check a configuration and its backends without serving (serve's flags)
  keyway stats [--admin A]      live figures from a running keyway's admin listener
  keyway switchover --group G   a running keyway promotes a replica of G while its primary is up (--to, --hold)
  keyway failover --group G     a running keyway promotes G's most advanced replica: its primary is dead
  keyway bench memcache         the memcache door against memcached (memcaslap)
  keyway bench sql              the SQL door against MariaDB direct and haproxy (sysbench)
  keyway bench kv               the InnoDB memcached plugin's experiment: SELECT/INSERT vs keyway vs memcached
  keyway bench staleness        how long a direct write takes to reach reads through keyway
  keyway bench cache            the consistent cache side by side: sysbench, PHP loops, staleness, restart
  keyway bench report --out D   every suite, then one HTML report (D/index.html) and D/report.json
  keyway bench compare OLD NEW  each figure's change between two report.json files, regressions marked
  keyway version                print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "check":
		return runCheck(args[1:], stdout, stderr)
	case "stats":
		return runStats(args[1:], stdout, stderr)
	case "failover", "switchover":
		return runPromote(args[0], args[1:], stdout, stderr)
	case "version", "-v", "--version":
		fmt.Fprintf(stdout, "keyway %s (memcached protocol %s)\n", version, memcache.ProtocolVersion)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "keyway: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func serve(args []string, stdout, stderr io.Writer) int {
	cfg, inv, err := config.ParseServeCommand(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "keyway serve: %v\n", err)
		return 2
	}
	log := newLogger(stderr, inv.LogLevel)
	for _, n := range inv.Notes { // memcached's flags that keyway accepts without acting on them
		log.Log(context.Background(), n.Level, n.Msg)
	}
	useDriverLogger(log)
	// KEYWAY_CPUPROFILE=FILE profiles the whole serve run, for finding where time goes under a benchmark;
	// "%p" in FILE becomes the process id, so each keyway a benchmark starts keeps its own profile.
	if path := os.Getenv("KEYWAY_CPUPROFILE"); path != "" {
		f, err := createPerProcess(path)
		if err != nil {
			fmt.Fprintf(stderr, "keyway serve: KEYWAY_CPUPROFILE: %v\n", err)
			return 1
		}
		pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	// KEYWAY_TRACE=FILE writes a runtime trace of the run the same way (go tool trace; -pprof=net, sched, sync and
	// syscall say where requests wait). A trace grows by megabytes per second under load: keep such runs short.
	if path := os.Getenv("KEYWAY_TRACE"); path != "" {
		f, err := createPerProcess(path)
		if err != nil {
			fmt.Fprintf(stderr, "keyway serve: KEYWAY_TRACE: %v\n", err)
			return 1
		}
		trace.Start(f)
		defer func() { trace.Stop(); f.Close() }()
	}
	// KEYWAY_MEMPROFILE=FILE writes the allocations of the whole serve run (go tool pprof -sample_index=alloc_space
	// or alloc_objects) when keyway stops, the same way.
	if path := os.Getenv("KEYWAY_MEMPROFILE"); path != "" {
		f, err := createPerProcess(path)
		if err != nil {
			fmt.Fprintf(stderr, "keyway serve: KEYWAY_MEMPROFILE: %v\n", err)
			return 1
		}
		defer func() { pprof.Lookup("allocs").WriteTo(f, 0); f.Close() }()
	}
	// KEYWAY_MUTEXPROFILE=FILE writes where goroutines waited for a mutex held by another (go tool pprof; the
	// stacks are the holders' at Unlock) when keyway stops, the same way. Every contention is sampled.
	if path := os.Getenv("KEYWAY_MUTEXPROFILE"); path != "" {
		f, err := createPerProcess(path)
		if err != nil {
			fmt.Fprintf(stderr, "keyway serve: KEYWAY_MUTEXPROFILE: %v\n", err)
			return 1
		}
		runtime.SetMutexProfileFraction(1)
		defer func() { pprof.Lookup("mutex").WriteTo(f, 0); f.Close() }()
	}
	// SIGHUP reloads what can change while serving (see reload); its default action would end keyway silently.
	// Caught before the doors open: a client can reach keyway, and a supervisor signal it, before Start returns.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	srv, err := server.Start(cfg, server.Options{Logger: log, Version: version})
	if err != nil {
		fmt.Fprintf(stderr, "keyway serve: %v\n", err)
		return 1
	}
	code := 0
wait:
	for {
		select {
		case s := <-sig:
			if s == syscall.SIGHUP {
				reload(srv, args, log)
				continue
			}
			log.Info("stopping", "signal", s.String())
			break wait
		case err := <-srv.Err():
			log.Error("memcache listener failed", "err", err)
			code = 1
			break wait
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Stop(ctx); err != nil { // Stop logs the last line, with its errors
		code = 1
	}
	return code
}

// reload reads the configuration again with serve's own arguments (the same file, the same flags over it) and
// applies what can change without a restart (server.Reload). An invalid file changes nothing.
func reload(srv *server.Server, args []string, log *slog.Logger) {
	cfg, err := config.ParseServeArgs(args, io.Discard)
	if err != nil {
		log.Error("SIGHUP: the configuration does not load; nothing changed", "err", err)
		return
	}
	applied, restart, err := srv.Reload(cfg)
	if err != nil {
		log.Error("SIGHUP: reload failed; nothing changed", "err", err)
	} else if len(applied) > 0 {
		log.Info("SIGHUP: configuration reloaded", "applied", strings.Join(applied, " "))
	} else {
		log.Info("SIGHUP: configuration read again; nothing that reloads changed")
	}
	if len(restart) > 0 {
		log.Warn("SIGHUP: these keys changed but take a restart; they keep their running values", "keys", strings.Join(restart, " "))
	}
}

// newLogger is keyway's log: slog's text format on w, one line per event, from level up. An error attribute is
// written as its message (errorText), whichever library made it.
func newLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: errorText}))
}

// errorText is a ReplaceAttr that writes an error value as err.Error(). The text handler formats other values with
// %+v, which for errors of github.com/pingcap/errors (go-mysql's) appends a Go stack trace of a kilobyte or more:
// noise in a log an operator reads, repeated at every reconnection in an outage.
func errorText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindAny {
		return a
	}
	if err, ok := a.Value.Any().(error); ok {
		a.Value = slog.StringValue(errorMessage(err))
	}
	return a
}

// errorMessage is err.Error(); for an Error method that panics, what the text handler would show for a nil pointer,
// or that it panicked.
func errorMessage(err error) (msg string) {
	defer func() {
		if recover() != nil {
			if v := reflect.ValueOf(err); v.Kind() == reflect.Pointer && v.IsNil() {
				msg = fmt.Sprintf("<nil %T>", err)
			} else {
				msg = fmt.Sprintf("<%T: Error panicked>", err)
			}
		}
	}()
	return err.Error()
}

// useDriverLogger sends go-sql-driver's own lines (a write on a connection found closed while idle) to log,
// instead of to stderr in the driver's format.
func useDriverLogger(log *slog.Logger) {
	_ = mysql.SetLogger(driverLogger{log.With("component", "mysql-driver")}) // fails only on a nil logger
}

// driverLogger is go-sql-driver's Logger on slog: its lines are warnings (a dropped connection, a bad packet).
type driverLogger struct{ log *slog.Logger }

func (l driverLogger) Print(v ...any) { l.log.Warn(strings.TrimSpace(fmt.Sprint(v...))) }

// isTerminal reports whether w is a terminal (a character device), for the commands that redraw a status line or a
// screen there and print plain lines otherwise; no dependency is needed for it.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// parseFlags parses a subcommand's flags. Asked for help (-h, --help), it prints the usage on stdout, where a user
// asked for it, and says to exit 0; a bad flag is reported on stderr, exit status 2. Otherwise done is false and the
// command goes on, with fs reporting on stderr.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (status int, done bool) {
	usage := fs.Usage
	if usage == nil {
		usage = func() {
			fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
	}
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		fs.SetOutput(stderr)
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, true
	}
	fs.SetOutput(stderr)
	fmt.Fprintf(stderr, "%s: %v (see %s -h)\n", fs.Name(), err, fs.Name())
	return 2, true
}

// createPerProcess creates the file at path with "%p" replaced by this process's id.
func createPerProcess(path string) (*os.File, error) {
	return os.Create(strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid())))
}

package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// serveFlags holds the parsed values of the flags of `keyway serve`. A value counts only if its flag was set on
// the command line (FlagSet.Visit), so a flag left out never overrides the file.
type serveFlags struct {
	config      string
	port        string
	host        string
	memoryLimit int64
	maxConns    int
	maxItemSize int64
	dataDir     string
	durability  string
	sqlListen   string
	adminListen string

	// memcached's flags that keyway accepts without acting on them (see Invocation).
	threads   int
	user      string
	daemonize bool
	verbosity int // 1 for -v, 2 for -vv, 3 for -vvv
}

// Invocation is what serve's command line says besides the configuration: the log level memcached's -v, -vv and
// -vvv ask for, and a note for each memcached flag keyway accepts without acting on it (-t, -u), for serve to log
// once it has a logger. A command line that memcached's users type works unchanged, and the log says what keyway
// did with each flag.
type Invocation struct {
	LogLevel slog.Level // Info by default and with -v; Debug with -vv or -vvv
	Notes    []Note
}

// Note is one line for serve's log at startup.
type Note struct {
	Level slog.Level
	Msg   string
}

// UsageError is a command line that is not one: an unknown flag, a flag's value of the wrong form, an argument
// where only flags go. Commands exit 2 for it (the configuration's own problems are other errors).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ParseServeArgs parses the arguments of `keyway serve` (without the command name itself) into a validated Config.
//
// The flags are memcached's where memcached has one: -p PORT, -l ADDR, -m MEGABYTES, -c MAXCONNS, -I SIZE. Long
// flags take one or two dashes. The file named by --config is read first; every flag set on the command line then
// overrides it, whatever their order. Then defaults are filled in and the result validated, every problem reported
// at once. It prints nothing but the usage, to usage (the command's stdout), for -h or --help, and then returns flag.ErrHelp; the
// caller prints any other error.
func ParseServeArgs(args []string, usage io.Writer) (Config, error) {
	c, _, err := ParseServeCommand(args, usage)
	return c, err
}

// ParseServeCommand is ParseServeArgs that also returns what the command line says besides the configuration.
func ParseServeCommand(args []string, usage io.Writer) (Config, Invocation, error) {
	return parseArgs("serve", "Serves the memcache door, and the SQL door when sql.listen is set.", args, usage)
}

// ParseArgs is ParseServeArgs for another command that takes serve's flags (`keyway check`): command names it in
// the usage and errors, and about says what it does, in the usage.
func ParseArgs(command, about string, args []string, usage io.Writer) (Config, error) {
	c, _, err := parseArgs(command, about, args, usage)
	return c, err
}

func parseArgs(command, about string, args []string, usage io.Writer) (Config, Invocation, error) {
	name := "keyway " + command
	// Nothing is printed while parsing: a flag error is returned like any other, for the caller to print once.
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}

	var f serveFlags
	fs.StringVar(&f.config, "config", "", "read the TOML configuration `file` first")
	fs.Func("p", "memcache.listen: TCP `port` to listen on (keeps the host; 0 = any free port)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 65535 {
			return errors.New("want a port number from 0 to 65535")
		}
		f.port = s
		return nil
	})
	fs.Func("l", "memcache.listen: `address` to listen on, a host or host:port (keeps the port if none given)", func(s string) error {
		if strings.Contains(s, ",") {
			return errors.New("want one address: keyway listens on one address")
		}
		f.host = s
		return nil
	})
	fs.Func("m", "memcache.memory_limit: item memory in `megabytes` (default 64)", func(s string) error {
		n, ok := parseSize(s, mib)
		if !ok {
			return errors.New(`want megabytes as a whole number ("64"), or a size with unit ("512m", "2g")`)
		}
		f.memoryLimit = n
		return nil
	})
	fs.Func("c", "memcache.max_connections: most concurrent client `connections` (default 1024)", func(s string) (err error) {
		f.maxConns, err = strconv.Atoi(s)
		if err != nil {
			return errors.New("want a whole number of connections, from 1 to 1048576")
		}
		return nil
	})
	fs.Func("I", "memcache.max_item_size: largest item `size`, in bytes or with unit k or m (default 1m)", func(s string) error {
		n, ok := parseSize(s, 1)
		if !ok {
			return errors.New(`want bytes ("1048576") or a size with unit k or m ("512k", "2m"), from 1k to 1024m`)
		}
		f.maxItemSize = n
		return nil
	})
	fs.StringVar(&f.dataDir, "data-dir", "", "store.data_dir: persist the local store in `dir` (empty = no persistence)")
	fs.Func("durability", `store.durability: `+"`mode`"+` none, async or sync (default async with --data-dir, else none)`, func(s string) error {
		switch s {
		case DurabilityNone, DurabilityAsync, DurabilitySync:
			f.durability = s
			return nil
		}
		return errors.New(wantDurability)
	})

	fs.StringVar(&f.sqlListen, "sql-listen", "", "sql.listen: `address` host:port of the SQL door (empty = no SQL door)")
	fs.StringVar(&f.adminListen, "admin-listen", "", "admin.listen: `address` host:port of the admin HTTP listener (empty = none)")

	// memcached's flags that do not apply to keyway are accepted as memcached's users type them, and said what
	// became of them (Invocation); only -d is refused, because accepting it would leave a script that expects
	// the command to return waiting on a server in the foreground.
	fs.Func("t", "memcached's worker `threads`: accepted and ignored; keyway runs on GOMAXPROCS threads", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return errors.New("want a number of threads, 1 or more")
		}
		f.threads = n
		return nil
	})
	fs.StringVar(&f.user, "u", "", "memcached's run-as `user`: accepted and ignored; keyway runs as the user that starts it (systemd User=)")
	fs.BoolVar(&f.daemonize, "d", false, "memcached's daemonize: refused; run keyway under systemd (deploy/keyway.service) or another supervisor")
	for i, v := range []string{"v", "vv", "vvv"} {
		about := "memcached's verbosity: -v logs at info (the default), -vv and -vvv at debug"
		if i > 0 {
			about = "as -v"
		}
		fs.BoolFunc(v, about, func(string) error {
			f.verbosity = max(f.verbosity, i+1)
			return nil
		})
	}

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(usage, "Usage: "+name+" [flags]\n\n"+about+" Flags override the file given with --config.\n\n")
			fs.SetOutput(usage)
			fs.PrintDefaults()
			return Config{}, Invocation{}, flag.ErrHelp
		}
		return Config{}, Invocation{}, &UsageError{fmt.Errorf("%w (see %s -h)", err, name)}
	}
	if fs.NArg() > 0 {
		return Config{}, Invocation{}, &UsageError{fmt.Errorf("unexpected argument %q: it takes flags only (see %s -h)", fs.Arg(0), name)}
	}
	if f.daemonize {
		return Config{}, Invocation{}, &UsageError{errors.New("-d: keyway does not daemonize; run it in the foreground under systemd (deploy/keyway.service) or another supervisor")}
	}
	inv := f.invocation()

	c := start()
	var fileProblems error
	var decodeProblems []error
	if f.config != "" {
		data, err := os.ReadFile(f.config)
		if err != nil {
			return Config{}, Invocation{}, fmt.Errorf("config: %w", err)
		}
		problems, err := decodeFile(&c, data)
		if err != nil {
			return Config{}, Invocation{}, fmt.Errorf("%s: %w", f.config, err)
		}
		decodeProblems = problems
		if err := errors.Join(problems...); err != nil {
			fileProblems = fmt.Errorf("%s: %w", f.config, err)
		}
	}
	// A key the file got wrong and a flag then set is validated again; any other key the file got wrong is not.
	fs.Visit(func(fl *flag.Flag) {
		if key := f.applyTo(&c, fl.Name); key != "" {
			decodeProblems = slices.DeleteFunc(decodeProblems, func(err error) bool {
				pr, ok := err.(*problem)
				return ok && pr.bareKey() == key
			})
		}
	})
	c.finish()
	if err := errors.Join(fileProblems, errors.Join(c.validate().besides(decodeProblems)...)); err != nil {
		return Config{}, Invocation{}, err
	}
	return c, inv, nil
}

// invocation says what became of memcached's flags that keyway does not act on.
func (f *serveFlags) invocation() Invocation {
	inv := Invocation{LogLevel: slog.LevelInfo}
	if f.verbosity >= 2 {
		inv.LogLevel = slog.LevelDebug
	}
	if f.threads > 0 {
		inv.Notes = append(inv.Notes, Note{slog.LevelInfo, fmt.Sprintf("-t %d: ignored; keyway runs on GOMAXPROCS threads (%d here; the GOMAXPROCS environment variable sets it)", f.threads, runtime.GOMAXPROCS(0))})
	}
	if f.user != "" {
		inv.Notes = append(inv.Notes, Note{slog.LevelWarn, fmt.Sprintf("-u %s: ignored; keyway does not switch users, it runs as the user that starts it (set User= in deploy/keyway.service)", f.user)})
	}
	return inv
}

// applyTo copies the value of the flag called name onto c and returns the file key it sets ("" for none).
func (f *serveFlags) applyTo(c *Config, name string) string {
	switch name {
	case "p", "l":
		c.Memcache.Listen = f.listen(c.Memcache.Listen)
		return "memcache.listen"
	case "m":
		c.Memcache.MemoryLimit = f.memoryLimit
		return "memcache.memory_limit"
	case "c":
		c.Memcache.MaxConnections = f.maxConns
		return "memcache.max_connections"
	case "I":
		c.Memcache.MaxItemSize = f.maxItemSize
		return "memcache.max_item_size"
	case "data-dir":
		c.Store.DataDir = f.dataDir
		return "store.data_dir"
	case "durability":
		c.Store.Durability = f.durability
		return "store.durability"
	case "sql-listen":
		c.SQL.Listen = f.sqlListen
		return "sql.listen"
	case "admin-listen":
		c.Admin.Listen = f.adminListen
		return "admin.listen"
	}
	return ""
}

// listen combines -l and -p with the listen address from the file (or the default): -l replaces the host, and
// the port too if it has one; -p replaces the port. If the old address is not host:port it is returned as it is,
// for Validate to report.
func (f *serveFlags) listen(old string) string {
	if old == "" {
		old = defaultListen // the file turned the door off; -l or -p turn it on again
	}
	host, port, err := net.SplitHostPort(old)
	if err != nil {
		return old
	}
	if f.host != "" {
		if h, p, err := net.SplitHostPort(f.host); err == nil {
			host, port = h, p
		} else {
			host = strings.TrimSuffix(strings.TrimPrefix(f.host, "["), "]") // "[::1]" as well as "::1"
		}
	}
	if f.port != "" {
		port = f.port
	}
	return net.JoinHostPort(host, port)
}

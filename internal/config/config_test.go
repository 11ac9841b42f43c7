package config

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

func TestDefault(t *testing.T) {
	want := Config{
		Memcache: Memcache{
			Listen:         "127.0.0.1:11211",
			MemoryLimit:    64 << 20,
			MaxConnections: 1024,
			MaxItemSize:    1 << 20,
			WriteTimeout:   30 * time.Second,
		},
		Store: Store{
			DataDir:       "",
			Durability:    "none",
			FlushInterval: time.Second,
		},
		SQL:      SQL{MaxConnections: 1024, MaxHandshakes: 256, HandshakeTimeout: 10 * time.Second, AllowLocalInfile: true},
		Cache:    Cache{MaxStaleness: time.Second, MemoryLimit: 64 << 20},
		Sharding: Sharding{Source: "config", Schema: "keyway_shards"},
	}
	c := Default()
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Default() = %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	for _, data := range []string{"", "[memcache]\n[store]\n"} {
		c, err := Parse([]byte(data))
		if err != nil {
			t.Fatalf("Parse(%q): %v", data, err)
		}
		if !reflect.DeepEqual(c, want) {
			t.Fatalf("Parse(%q) = %+v, want the defaults", data, c)
		}
	}
}

func TestEnsureDefaultsDurability(t *testing.T) {
	c := Config{Store: Store{DataDir: "/var/lib/keyway"}}
	c.EnsureDefaults()
	if c.Store.Durability != DurabilityAsync {
		t.Fatalf("durability with data_dir = %q, want async", c.Store.Durability)
	}
	c = Config{Store: Store{DataDir: "/var/lib/keyway", Durability: DurabilityNone}}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil || c.Store.Durability != DurabilityNone {
		t.Fatalf("data_dir with durability none: %q, %v; want it kept and valid", c.Store.Durability, err)
	}
}

func TestParseFullFile(t *testing.T) {
	c, err := Parse([]byte(`
[memcache]
listen = "0.0.0.0:22122"
memory_limit = 512          # megabytes, like memcached -m
max_connections = 4096
max_item_size = "2MB"

[store]
data_dir = "/var/lib/keyway"
durability = "sync"
flush_interval = "250ms"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Memcache: Memcache{Listen: "0.0.0.0:22122", MemoryLimit: 512 << 20, MaxConnections: 4096, MaxItemSize: 2 << 20, WriteTimeout: 30 * time.Second},
		Store:    Store{DataDir: "/var/lib/keyway", Durability: "sync", FlushInterval: 250 * time.Millisecond},
		SQL:      SQL{MaxConnections: 1024, MaxHandshakes: 256, HandshakeTimeout: 10 * time.Second, AllowLocalInfile: true},
		Cache:    Cache{MaxStaleness: time.Second, MemoryLimit: 64 << 20},
		Sharding: Sharding{Source: "config", Schema: "keyway_shards"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
}

func TestParseSizes(t *testing.T) {
	tests := []struct {
		toml        string
		memoryLimit int64
		maxItemSize int64
	}{
		{`memory_limit = 64`, 64 << 20, 1 << 20},
		{`memory_limit = "64"`, 64 << 20, 1 << 20}, // a bare number means the same in a string
		{`memory_limit = "1GiB"`, 1 << 30, 1 << 20},
		{`memory_limit = "1 GB"`, 1 << 30, 1 << 20},
		{`memory_limit = "2048k"`, 2 << 20, 1 << 20},
		{`max_item_size = 4096`, 64 << 20, 4096},
		{`max_item_size = "4096"`, 64 << 20, 4096},
		{`max_item_size = "1m"`, 64 << 20, 1 << 20},
		{`max_item_size = "512KiB"`, 64 << 20, 512 << 10},
		{`max_item_size = "1024m"`, 64 << 20, 1 << 30},
	}
	for _, tt := range tests {
		c, err := Parse([]byte("[memcache]\n" + tt.toml))
		if err != nil {
			t.Errorf("%s: %v", tt.toml, err)
			continue
		}
		if c.Memcache.MemoryLimit != tt.memoryLimit || c.Memcache.MaxItemSize != tt.maxItemSize {
			t.Errorf("%s: memory_limit %d, max_item_size %d; want %d, %d",
				tt.toml, c.Memcache.MemoryLimit, c.Memcache.MaxItemSize, tt.memoryLimit, tt.maxItemSize)
		}
	}
}

// wantErrors checks that err has one line per problem, each containing the given fragments.
func wantErrors(t *testing.T, err error, lines ...[]string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %d problems", len(lines))
	}
	got := strings.Split(err.Error(), "\n")
	if len(got) != len(lines) {
		t.Fatalf("got %d problems, want %d:\n%v", len(got), len(lines), err)
	}
	for i, frags := range lines {
		for _, frag := range frags {
			if !strings.Contains(got[i], frag) {
				t.Errorf("problem %d = %q; want it to contain %q", i, got[i], frag)
			}
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		name, toml string
		want       []string
	}{
		{"key in section", "[memcache]\nmax_conns = 10\n",
			[]string{"unknown key memcache.max_conns", "[memcache] allows", "max_connections"}},
		{"section", "[mysql]\nlisten = \"x\"\nport = 3306\n",
			[]string{"unknown key mysql:", "the top level allows [memcache], [store], [sql], [[groups]], [admin]"}},
		{"key at top level", "listen = \"127.0.0.1:1\"\n",
			[]string{"unknown key listen:", "the top level allows [memcache], [store], [sql], [[groups]], [admin]"}},
		{"dotted", "store.dir = \"/x\"\n",
			[]string{"unknown key store.dir:", "[store] allows data_dir, durability, flush_interval"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.toml))
			wantErrors(t, err, tt.want)
		})
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]byte(`
[memcache]
listen = "localhost"        # no port
memory_limit = "64XB"       # unknown unit
max_connections = 0
max_item_size = "2g"        # above 1 GiB
bogus = 1

[store]
durability = "fast"
flush_interval = 5          # not a duration string
`))
	wantErrors(t, err,
		[]string{"unknown key memcache.bogus"},
		[]string{"memcache.memory_limit", `"64XB"`, "want megabytes"},
		[]string{"store.flush_interval = 5", `want a duration like "1s"`},
		[]string{"memcache.listen", `"localhost"`, "host:port"},
		[]string{"memcache.max_connections (-c) = 0", "from 1 to 1048576"},
		[]string{"memcache.max_item_size (-I) = 2 GiB", "from 1 KiB to 1 GiB"},
		[]string{"store.durability", `"fast"`, `want "none", "async" or "sync"`},
	)
}

// A 0 the user wrote is an error, not a request for the default.
func TestExplicitZero(t *testing.T) {
	_, err := Parse([]byte(`
[memcache]
memory_limit = 0
max_connections = 0
max_item_size = "0k"
[store]
flush_interval = "0s"
`))
	wantErrors(t, err,
		[]string{"memcache.memory_limit (-m) = 0 bytes"},
		[]string{"memcache.max_connections (-c) = 0"},
		[]string{"memcache.max_item_size (-I) = 0 bytes"},
		[]string{"store.flush_interval = \"0s\""},
	)
}

func TestWrongTypes(t *testing.T) {
	_, err := Parse([]byte(`
[memcache]
listen = { host = "x", port = 1 }
memory_limit = 1.5
max_connections = "10"
max_item_size = true
[store]
data_dir = ["/a", "/b"]
durability = 1
flush_interval = "soon"
`))
	wantErrors(t, err,
		[]string{"memcache.listen = a table", "host:port"},
		[]string{"memcache.memory_limit = 1.5", "want megabytes"},
		[]string{`memcache.max_connections = "10"`, "want an integer"},
		[]string{"memcache.max_item_size = true", "want bytes"},
		[]string{"store.data_dir = an array", "directory path"},
		[]string{"store.durability = 1", `"none", "async" or "sync"`},
		[]string{`store.flush_interval = "soon"`, "duration"},
	)
}

func TestDurabilityNeedsDataDir(t *testing.T) {
	for _, mode := range []string{"async", "sync"} {
		_, err := Parse([]byte("[store]\ndurability = \"" + mode + "\"\n"))
		wantErrors(t, err, []string{"store.durability", mode, "needs store.data_dir"})
	}
	if _, err := Parse([]byte("[store]\ndurability = \"none\"\n")); err != nil {
		t.Fatalf("durability none without data_dir: %v", err)
	}
	c, err := Parse([]byte("[store]\ndata_dir = \"/tmp/kw\"\n"))
	if err != nil || c.Store.Durability != DurabilityAsync {
		t.Fatalf("data_dir alone: durability %q, %v; want async", c.Store.Durability, err)
	}
}

func TestParseSyntaxError(t *testing.T) {
	_, err := Parse([]byte("[memcache\nlisten = 1"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v; want a TOML syntax error with its line", err)
	}
}

// TestParseUnquotedValue: a bare address is a TOML syntax error whose message says to quote it, with the line as
// it should read; a syntax error that quoting does not fix gets no such hint.
func TestParseUnquotedValue(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"[memcache]\nlisten = 127.0.0.1:11211\n", `listen = "127.0.0.1:11211"`},
		{"[sql]\n  listen = localhost:3307   # the SQL door\n", `listen = "localhost:3307"`},
		{"[[groups]]\nname = \"main\"\nprimary = 10.0.0.5:3306\n", `primary = "10.0.0.5:3306"`},
	} {
		_, err := Parse([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), "must be quoted: "+tc.want) || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%q: err = %v; want the TOML error with its line and the quoted line %s", tc.file, err, tc.want)
		}
	}
	_, err := Parse([]byte("[memcache\nlisten = \"127.0.0.1:11211\"\n"))
	if err == nil || strings.Contains(err.Error(), "quoted") {
		t.Errorf("unclosed table header: err = %v; want the TOML error alone", err)
	}
	if c, err := Parse([]byte("[memcache]\nlisten = \"127.0.0.1:11211\"\n")); err != nil || c.Memcache.Listen != "127.0.0.1:11211" {
		t.Errorf("quoted address: listen %q, %v", c.Memcache.Listen, err)
	}
}

func writeFile(t *testing.T, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keyway.toml")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadFile(t *testing.T) {
	path := writeFile(t, "[memcache]\nmax_connections = 10\n")
	c, err := LoadFile(path)
	if err != nil || c.Memcache.MaxConnections != 10 {
		t.Fatalf("LoadFile: %+v, %v", c, err)
	}
	bad := writeFile(t, "[memcache]\nmax_connections = -1\n")
	if _, err := LoadFile(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": memcache.max_connections") {
		t.Fatalf("err = %v; want it prefixed with the path", err)
	}
	if _, err := LoadFile(filepath.Join(t.TempDir(), "missing.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v; want ErrNotExist", err)
	}
}

func TestServeArgs(t *testing.T) {
	file := writeFile(t, `
[memcache]
listen = "10.0.0.1:5000"
memory_limit = 128
max_connections = 100
max_item_size = "512k"
[store]
data_dir = "/from/file"
durability = "sync"
`)
	tests := []struct {
		name string
		args []string
		want func(*Config) // edits Default() into the expected Config
	}{
		{"none", nil, func(c *Config) {}},
		{"memcached flags", []string{"-p", "11311", "-m", "256", "-c", "50", "-I", "2m"}, func(c *Config) {
			c.Memcache = Memcache{Listen: "127.0.0.1:11311", MemoryLimit: 256 << 20, MaxConnections: 50, MaxItemSize: 2 << 20, WriteTimeout: 30 * time.Second}
		}},
		{"-I in bytes", []string{"-I", "4096"}, func(c *Config) { c.Memcache.MaxItemSize = 4096 }},
		{"-I 1024m", []string{"-I", "1024m"}, func(c *Config) { c.Memcache.MaxItemSize = 1 << 30 }},
		{"-l keeps port", []string{"-l", "0.0.0.0"}, func(c *Config) { c.Memcache.Listen = "0.0.0.0:11211" }},
		{"-l and -p", []string{"-p", "9000", "-l", "10.1.2.3"}, func(c *Config) { c.Memcache.Listen = "10.1.2.3:9000" }},
		{"-l IPv6", []string{"-l", "::1"}, func(c *Config) { c.Memcache.Listen = "[::1]:11211" }},
		{"-l host:port", []string{"-l", "127.0.0.2:7000"}, func(c *Config) { c.Memcache.Listen = "127.0.0.2:7000" }},
		{"-p wins over -l port", []string{"-l", "127.0.0.2:7000", "-p", "7001"}, func(c *Config) { c.Memcache.Listen = "127.0.0.2:7001" }},
		{"data dir defaults durability", []string{"--data-dir", "/d"}, func(c *Config) {
			c.Store.DataDir, c.Store.Durability = "/d", "async"
		}},
		{"file only", []string{"--config", file}, func(c *Config) {
			c.Memcache = Memcache{Listen: "10.0.0.1:5000", MemoryLimit: 128 << 20, MaxConnections: 100, MaxItemSize: 512 << 10, WriteTimeout: 30 * time.Second}
			c.Store.DataDir, c.Store.Durability = "/from/file", "sync"
		}},
		{"flags override file", []string{"-p", "6000", "-c", "7", "-config", file, "--durability", "async", "--data-dir", "/from/flag"}, func(c *Config) {
			c.Memcache = Memcache{Listen: "10.0.0.1:6000", MemoryLimit: 128 << 20, MaxConnections: 7, MaxItemSize: 512 << 10, WriteTimeout: 30 * time.Second}
			c.Store.DataDir, c.Store.Durability = "/from/flag", "async"
		}},
		{"-l keeps file port", []string{"--config", file, "-l", "127.0.0.1"}, func(c *Config) {
			c.Memcache = Memcache{Listen: "127.0.0.1:5000", MemoryLimit: 128 << 20, MaxConnections: 100, MaxItemSize: 512 << 10, WriteTimeout: 30 * time.Second}
			c.Store.DataDir, c.Store.Durability = "/from/file", "sync"
		}},
		{"empty data dir flag turns persistence off", []string{"--config", file, "--data-dir", "", "--durability", "none"}, func(c *Config) {
			c.Memcache = Memcache{Listen: "10.0.0.1:5000", MemoryLimit: 128 << 20, MaxConnections: 100, MaxItemSize: 512 << 10, WriteTimeout: 30 * time.Second}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			got, err := ParseServeArgs(tt.args, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
			if stderr.Len() != 0 {
				t.Fatalf("wrote to stderr: %q", stderr.String())
			}
		})
	}
}

func TestServeArgsErrors(t *testing.T) {
	file := writeFile(t, "[memcache]\nmax_connections = \"many\"\n")
	tests := []struct {
		name  string
		args  []string
		wants [][]string
	}{
		{"bad -I", []string{"-I", "2x"}, [][]string{{"-I", "from 1k to 1024m"}}},
		{"-I too big", []string{"-I", "2048m"}, [][]string{{"memcache.max_item_size (-I) = 2 GiB", "from 1 KiB to 1 GiB"}}},
		{"-I too small", []string{"-I", "100"}, [][]string{{"memcache.max_item_size (-I) = 100 bytes"}}},
		{"bad -p", []string{"-p", "70000"}, [][]string{{"-p", "from 0 to 65535"}}},
		{"bad -m", []string{"-m", "lots"}, [][]string{{"-m", "want megabytes"}}},
		{"zero -m", []string{"-m", "0"}, [][]string{{"memcache.memory_limit (-m) = 0 bytes", "at least 1 MiB"}}},
		{"bad -c", []string{"-c", "x"}, [][]string{{"-c", "from 1 to 1048576"}}},
		{"bad durability", []string{"--durability", "fast"}, [][]string{{"-durability", `want "none", "async" or "sync"`}}},
		{"unknown flag", []string{"--bogus"}, [][]string{{"flag provided but not defined: -bogus"}}},
		{"-d", []string{"-d", "-p", "11211"}, [][]string{{"-d: keyway does not daemonize", "deploy/keyway.service"}}},
		{"bad -t", []string{"-t", "0"}, [][]string{{"-t", "want a number of threads"}}},
		{"argument", []string{"extra"}, [][]string{{`unexpected argument "extra"`}}},
		{"durability without data dir", []string{"--durability", "sync"},
			[][]string{{"store.durability (--durability)", "needs store.data_dir (--data-dir)"}}},
		{"file and flag problems together", []string{"--config", file, "-c", "0", "-I", "1g", "--durability", "sync"}, [][]string{
			{file + ": memcache.max_connections", `"many"`},
			{"memcache.max_connections (-c) = 0"},
			{"store.durability", "needs store.data_dir"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, err := ParseServeArgs(tt.args, &stderr)
			wantErrors(t, err, tt.wants...)
			if stderr.Len() != 0 {
				t.Fatalf("wrote to stderr: %q", stderr.String())
			}
		})
	}
}

// TestServeArgsMemcachedFlags: memcached's -t, -u, -v, -vv and -vvv are accepted as memcached's users type them,
// with a note for serve's log where keyway does not act on the flag, and -vv or -vvv for the debug level.
func TestServeArgsMemcachedFlags(t *testing.T) {
	tests := []struct {
		args  []string
		level slog.Level
		notes []string // one substring per note, in order
	}{
		{[]string{"-p", "11211"}, slog.LevelInfo, nil},
		{[]string{"-t", "4", "-p", "11311"}, slog.LevelInfo, []string{"-t 4: ignored; keyway runs on GOMAXPROCS threads"}},
		{[]string{"-u", "memcache"}, slog.LevelInfo, []string{"-u memcache: ignored; keyway does not switch users"}},
		{[]string{"-v"}, slog.LevelInfo, nil},
		{[]string{"-vv"}, slog.LevelDebug, nil},
		{[]string{"-vvv", "-v"}, slog.LevelDebug, nil},
		{[]string{"-m", "64", "-p", "11211", "-u", "memcache", "-l", "127.0.0.1", "-c", "1024", "-t", "2", "-vv"}, slog.LevelDebug,
			[]string{"-t 2", "-u memcache"}},
	}
	for _, tt := range tests {
		c, inv, err := ParseServeCommand(tt.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%q: %v", tt.args, err)
		}
		if inv.LogLevel != tt.level {
			t.Errorf("%q: log level %v, want %v", tt.args, inv.LogLevel, tt.level)
		}
		if len(inv.Notes) != len(tt.notes) {
			t.Fatalf("%q: notes %q, want %d", tt.args, inv.Notes, len(tt.notes))
		}
		for i, want := range tt.notes {
			if !strings.Contains(inv.Notes[i].Msg, want) {
				t.Errorf("%q: note %q, want it to say %q", tt.args, inv.Notes[i].Msg, want)
			}
		}
		if slices.Contains(tt.args, "-p") && !strings.HasSuffix(c.Memcache.Listen, ":"+tt.args[slices.Index(tt.args, "-p")+1]) {
			t.Errorf("%q: listen %q; the other flags still apply", tt.args, c.Memcache.Listen)
		}
	}
	if _, inv, _ := ParseServeCommand([]string{"-u", "memcache"}, &bytes.Buffer{}); inv.Notes[0].Level != slog.LevelWarn {
		t.Errorf("-u's note is at %v, want warn: keyway keeps running as another user than asked", inv.Notes[0].Level)
	}
}

func TestServeArgsHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var stderr bytes.Buffer
		_, err := ParseServeArgs([]string{arg}, &stderr)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: err = %v, want flag.ErrHelp", arg, err)
		}
		for _, want := range []string{"Usage: keyway serve", "-I size", "-p port", "-config file", "-durability mode"} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("%s: usage lacks %q:\n%s", arg, want, stderr.String())
			}
		}
	}
}

func TestServeArgsMissingFile(t *testing.T) {
	_, err := ParseServeArgs([]string{"--config", filepath.Join(t.TempDir(), "nope.toml")}, &bytes.Buffer{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v; want ErrNotExist", err)
	}
}

// The SQL door: [sql], [[sql.users]], [[groups]] and [admin].

func TestParseSQLFull(t *testing.T) {
	dir := t.TempDir()
	cert, key := testenv.SelfSignedCert(t, dir)
	c, err := Parse([]byte(`
[sql]
listen = "127.0.0.1:3307"
max_connections = 500
tls_cert = "` + cert + `"
tls_key = "` + key + `"
allow_local_infile = true

[[sql.users]]
name = "app"
password = "secret"

[[sql.users]]
name = "report"
password = "r3"
auth_plugin = "mysql_native_password"
backend_user = "reader"
backend_password = "rpw"
group = "replica"

[[sql.users]]
name = "nopw"
password = "x"
backend_user = "root"
backend_password = ""       # a backend account without a password, kept as written

[[groups]]
name = "main"
primary = "10.0.0.5:3306"
user = "monitor"
password = "mon"

[[groups]]
name = "replica"
primary = "/run/mysqld/mysqld.sock"
user = "monitor"
min_idle = 4
max_open = 32
max_connections = 100
idle_timeout = "5m"
health_interval = "500ms"
connect_timeout = "1s"
tls = "verify"
tls_ca = "` + cert + `"
tls_server_name = "db.internal"

[admin]
listen = "127.0.0.1:9104"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.SQL = SQL{
		Listen: "127.0.0.1:3307", MaxConnections: 500, TLSCert: cert, TLSKey: key, AllowLocalInfile: true,
		MaxHandshakes: 256, HandshakeTimeout: 10 * time.Second,
		Users: []SQLUser{
			{Name: "app", Password: "secret", AuthPlugin: "", BackendUser: "app", BackendPassword: "secret", Group: "main"}, // "": the backend's
			{Name: "report", Password: "r3", AuthPlugin: "mysql_native_password", BackendUser: "reader", BackendPassword: "rpw", Group: "replica"},
			{Name: "nopw", Password: "x", BackendUser: "root", BackendPassword: "", Group: "main"},
		},
	}
	want.Groups = []Group{
		{Name: "main", Primary: "10.0.0.5:3306", User: "monitor", Password: "mon",
			MinIdle: 0, MaxOpen: 256, IdleTimeout: time.Minute, HealthInterval: 2 * time.Second, ConnectTimeout: 5 * time.Second,
			TLS: "preferred", ReadFrom: ReadPrimary, MaxReplicaLag: time.Second},
		{Name: "replica", Primary: "/run/mysqld/mysqld.sock", User: "monitor",
			MinIdle: 4, MaxOpen: 32, MaxConnections: 100, IdleTimeout: 5 * time.Minute, HealthInterval: 500 * time.Millisecond, ConnectTimeout: time.Second,
			TLS: "verify", TLSCA: cert, TLSServerName: "db.internal", ReadFrom: ReadPrimary, MaxReplicaLag: time.Second},
	}
	want.Admin.Listen = "127.0.0.1:9104"
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
}

// minimalSQL is the smallest file that turns the SQL door on.
const minimalSQL = `
[sql]
listen = "127.0.0.1:0"
[[sql.users]]
name = "app"
password = "secret"
[[groups]]
name = "g"
primary = "127.0.0.1:3306"
user = "app"
password = "secret"
`

func TestParseSQLMinimal(t *testing.T) {
	c, err := Parse([]byte(minimalSQL))
	if err != nil {
		t.Fatal(err)
	}
	u := SQLUser{Name: "app", Password: "secret", AuthPlugin: "", BackendUser: "app", BackendPassword: "secret", Group: "g"} // "": the backend's
	if len(c.SQL.Users) != 1 || c.SQL.Users[0] != u {
		t.Errorf("users = %+v, want [%+v]", c.SQL.Users, u)
	}
	g := Group{Name: "g", Primary: "127.0.0.1:3306", User: "app", Password: "secret",
		MaxOpen: 256, IdleTimeout: 60 * time.Second, HealthInterval: 2 * time.Second, ConnectTimeout: 5 * time.Second,
		TLS:      TLSPreferred,                            // the default: TLS when the backend offers it
		ReadFrom: ReadPrimary, MaxReplicaLag: time.Second, // max_replica_lag: cache.max_staleness
	}
	if len(c.Groups) != 1 || !reflect.DeepEqual(c.Groups[0], g) {
		t.Errorf("groups = %+v, want [%+v]", c.Groups, g)
	}
	if c.SQL.MaxConnections != 1024 || !c.SQL.AllowLocalInfile || c.SQL.TLSCert != "" || c.Admin.Listen != "" {
		t.Errorf("sql = %+v, admin = %+v; want the defaults", c.SQL, c.Admin)
	}
}

// Groups and users without the SQL door are allowed (the memcache door will use groups too).
func TestGroupsWithoutSQLDoor(t *testing.T) {
	c, err := Parse([]byte("[[groups]]\nname = \"g\"\nprimary = \"db:3306\"\nuser = \"u\"\n"))
	if err != nil || c.SQL.Listen != "" || len(c.Groups) != 1 {
		t.Fatalf("Parse: %+v, %v", c, err)
	}
}

func TestEnsureDefaultsSQL(t *testing.T) {
	c := Config{
		SQL: SQL{Listen: "127.0.0.1:3306", Users: []SQLUser{
			{Name: "a", Password: "pa"},
			{Name: "b", Password: "pb", BackendUser: "bb", BackendPassword: "x", Group: "two", AuthPlugin: AuthNativePassword},
		}},
		Groups: []Group{{Name: "one", Primary: "h:1", User: "m"}, {Name: "two", Primary: "h:2", User: "m", MaxOpen: 3}},
	}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	a, b := c.SQL.Users[0], c.SQL.Users[1]
	if a != (SQLUser{Name: "a", Password: "pa", AuthPlugin: "", BackendUser: "a", BackendPassword: "pa", Group: "one"}) {
		t.Errorf("user a = %+v", a)
	}
	if b != (SQLUser{Name: "b", Password: "pb", BackendUser: "bb", BackendPassword: "x", Group: "two", AuthPlugin: AuthNativePassword}) {
		t.Errorf("user b = %+v", b)
	}
	if g := c.Groups[1]; g.MaxOpen != 3 || g.IdleTimeout != time.Minute || g.HealthInterval != 2*time.Second || g.ConnectTimeout != 5*time.Second {
		t.Errorf("group two = %+v", g)
	}
	if c.SQL.MaxConnections != 1024 {
		t.Errorf("max_connections = %d", c.SQL.MaxConnections)
	}
}

// TestGroupTLSProblems: [[groups]] tls takes the four ssl-mode-like values; tls_ca must be a readable PEM file and,
// like tls_server_name, belongs to tls = "verify" only. Every problem names its key.
func TestGroupTLSProblems(t *testing.T) {
	dir := t.TempDir()
	cert, _ := testenv.SelfSignedCert(t, dir)
	notPEM := filepath.Join(dir, "x.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	group := func(i int, extra string) string {
		return "[[groups]]\nname = \"g" + strconv.Itoa(i) + "\"\nprimary = \"db:3306\"\nuser = \"u\"\n" + extra + "\n"
	}
	_, err := Parse([]byte(group(0, `tls = "on"`) +
		group(1, `tls = "required"`+"\n"+`tls_ca = "`+cert+`"`) +
		group(2, `tls_server_name = "db"`) +
		group(3, `tls = "verify"`+"\n"+`tls_ca = "/nonexistent/ca.pem"`) +
		group(4, `tls = "verify"`+"\n"+`tls_ca = "`+notPEM+`"`) +
		group(5, `tls = 1`)))
	wantErrors(t, err,
		[]string{`groups[5].tls = 1`, `want "off", "preferred"`}, // the decoder's problems come first
		[]string{`groups[0].tls = "on"`, `want "off", "preferred"`},
		[]string{`groups[1].tls_ca = "` + cert + `"`, `only with tls = "verify"`, `tls is "required"`},
		[]string{`groups[2].tls_server_name = "db"`, `only with tls = "verify"`, `tls is "preferred"`},
		[]string{`groups[3].tls_ca = "/nonexistent/ca.pem"`, "cannot use it", "no such file"},
		[]string{`groups[4].tls_ca = "` + notPEM + `"`, "no PEM certificate"},
	)
	for _, extra := range []string{`tls = "off"`, `tls = "preferred"`, `tls = "required"`, `tls = "verify"`,
		`tls = "verify"` + "\n" + `tls_ca = "` + cert + `"` + "\n" + `tls_server_name = "db"`} {
		c, err := Parse([]byte(group(0, extra)))
		if err != nil {
			t.Fatalf("%s: %v", extra, err)
		}
		if !strings.Contains(extra, `"`+c.Groups[0].TLS+`"`) {
			t.Fatalf("%s: tls = %q", extra, c.Groups[0].TLS)
		}
	}
}

func TestSQLNeedsUsersAndGroups(t *testing.T) {
	_, err := Parse([]byte("[sql]\nlisten = \"127.0.0.1:3306\"\n"))
	wantErrors(t, err,
		[]string{"sql.users = none", "at least one [[sql.users]]"},
		[]string{"groups = none", "at least one [[groups]]"},
	)
	// The door off: nothing is needed.
	if _, err := Parse([]byte("[sql]\nmax_connections = 10\n")); err != nil {
		t.Fatalf("[sql] without listen: %v", err)
	}
}

func TestSQLEveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]byte(`
[sql]
listen = "localhost"            # no port
max_connections = -1

[[sql.users]]
name = "app"
auth_plugin = "sha256_password"
group = "nope"

[[sql.users]]
name = "app"                    # duplicate
backend_user = ""

[[sql.users]]
password = "no name"

[[groups]]
name = "g"
primary = "db"                  # no port
user = "m"
min_idle = 10
max_open = 5

[[groups]]
name = "g"                      # duplicate
primary = "relative/sock"
min_idle = -1
max_open = 2000000
idle_timeout = "-1s"

[[groups]]
name = "h"
primary = "db:0"
user = "m"
max_connections = -2

[admin]
listen = "9104"
`))
	wantErrors(t, err,
		[]string{`sql.listen (--sql-listen) = "localhost"`, "host:port"},
		[]string{"sql.max_connections = -1", "from 1 to 1048576"},
		[]string{`groups[0].primary = "db"`, "host:port", "absolute unix socket path"},
		[]string{"groups[0].min_idle = 10", "from 0 to max_open (5)"},
		[]string{`groups[1].name = "g"`, "unique", "groups[0] has it already"},
		[]string{`groups[1].primary = "relative/sock"`, "absolute unix socket path"},
		[]string{`groups[1].user = ""`, "monitoring connection"},
		[]string{"groups[1].max_open = 2000000", "from 1 to 1048576"},
		[]string{"groups[1].min_idle = -1", "from 0 to max_open"},
		[]string{`groups[1].idle_timeout = "-1s"`, "more than 0"},
		[]string{`groups[2].primary = "db:0"`},
		[]string{"groups[2].max_connections = -2", "the server's max_connections less a tenth"},
		[]string{`sql.users[0].auth_plugin = "sha256_password"`, `"mysql_native_password" or "caching_sha2_password"`},
		[]string{`sql.users[0].group = "nope"`, `"g", "h"`},
		[]string{`sql.users[1].name = "app"`, "sql.users[0] has it already"},
		[]string{`sql.users[1].backend_user = ""`, "backend"},
		[]string{`sql.users[2].name = ""`, "account name"},
		[]string{`admin.listen (--admin-listen) = "9104"`, "host:port"},
	)
}

// A 0 or "" written in the file is an error where it is not a valid value, not a request for the default.
func TestSQLExplicitZero(t *testing.T) {
	_, err := Parse([]byte(`
[sql]
listen = "127.0.0.1:0"
max_connections = 0
[[sql.users]]
name = "app"
auth_plugin = ""
backend_user = ""
group = ""
[[groups]]
name = "g"
primary = ""
user = "m"
min_idle = 0                    # valid: the default
max_open = 0
idle_timeout = "0s"
health_interval = "0s"
connect_timeout = "0s"
`))
	wantErrors(t, err,
		[]string{`sql.users[0].auth_plugin = ""`, "leave it out to follow the backend"}, // the file's own, before Validate's
		[]string{"sql.max_connections = 0"},
		[]string{`groups[0].primary = ""`},
		[]string{"groups[0].max_open = 0"},
		[]string{`groups[0].idle_timeout = "0s"`},
		[]string{`groups[0].health_interval = "0s"`},
		[]string{`groups[0].connect_timeout = "0s"`},
		[]string{`sql.users[0].backend_user = ""`},
		[]string{`sql.users[0].group = ""`, `want the name of a [[groups]] entry`, `"g"`},
	)
}

func TestSQLWrongTypes(t *testing.T) {
	_, err := Parse([]byte(`
[sql]
listen = 3306
max_connections = "many"
tls_cert = 1
allow_local_infile = "yes"
[[sql.users]]
name = 7
password = 1234
[[groups]]
name = "g"
primary = "h:1"
user = "m"
max_open = "10"
idle_timeout = 60
[admin]
listen = true
`))
	wantErrors(t, err,
		[]string{"groups[0].max_open = \"10\"", "want an integer"},
		[]string{"groups[0].idle_timeout = 60", "duration"},
		[]string{"sql.listen = 3306", "host:port"},
		[]string{`sql.max_connections = "many"`, "want an integer"},
		[]string{"sql.tls_cert = 1", "PEM file"},
		[]string{`sql.allow_local_infile = "yes"`, "true or false"},
		[]string{"sql.users[0].name = 7", "account name"},
		[]string{"sql.users[0].password = 1234", "want a string"},
		[]string{"admin.listen = true", "host:port"},
		// The user's name was not decoded, which leaves it empty: reported once, above, not again by Validate.
	)
	// A value where a table or array of tables belongs stops decoding, like a syntax error.
	for _, data := range []string{"groups = 5\n", "[sql]\nusers = 5\n", "[sql]\nusers = [1]\n"} {
		_, err := Parse([]byte(data))
		if err == nil || !strings.Contains(err.Error(), "line") {
			t.Errorf("Parse(%q) = %v; want a structural error with its line", data, err)
		}
	}
}

func TestSQLUnknownKeys(t *testing.T) {
	_, err := Parse([]byte(`
[sql]
listen = "127.0.0.1:0"
port = 3306
[[sql.users]]
name = "a"
[[sql.users]]
name = "b"
nmae = "c"
[[sql.users]]
name = "d"
nmae = "e"
[[groups]]
name = "g"
primary = "h:1"
user = "m"
secondary = "h:2"
[admin]
port = 1
`))
	wantErrors(t, err,
		[]string{"unknown key sql.port:", "[sql] allows listen, max_connections, tls_cert, tls_key, allow_local_infile, require_tls, max_handshakes, handshake_timeout, max_auth_failures, [[users]]"},
		[]string{"unknown key sql.users[1].nmae:", "[[sql.users]] allows name, password, auth_plugin, backend_user, backend_password, group"},
		[]string{"unknown key sql.users[2].nmae:"},
		[]string{"unknown key groups[0].secondary:", "[[groups]] allows name, primary, user, password, min_idle, max_open, max_connections, idle_timeout, health_interval, connect_timeout"},
		[]string{"unknown key admin.port:", "[admin] allows listen"},
	)
}

func TestValidPrimary(t *testing.T) {
	for s, want := range map[string]bool{
		"127.0.0.1:3306":                       true,
		"db.example.com:3306":                  true,
		"[::1]:3306":                           true,
		"/run/mysqld/mysqld.sock":              true,
		"/" + strings.Repeat("s", 106):         true,
		"/" + strings.Repeat("s", 107):         false, // longer than sun_path allows
		"":                                     false,
		"db":                                   false,
		":3306":                                false,
		"db:0":                                 false,
		"db:65536":                             false,
		"db:mysql":                             false,
		"mysqld.sock":                          false,
		"unix:/run/mysqld/mysqld.sock":         false,
		"tcp(127.0.0.1:3306)":                  false,
		"127.0.0.1:3306,127.0.0.1:3307":        false,
		"user:pw@tcp(127.0.0.1:3306)/database": false,
	} {
		if got := validPrimary(s); got != want {
			t.Errorf("validPrimary(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestSQLTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := testenv.SelfSignedCert(t, dir)
	file := func(cert, key string) string {
		s := minimalSQL + "\n"
		if cert != "" {
			s = strings.Replace(s, "[sql]\n", "[sql]\ntls_cert = \""+cert+"\"\n", 1)
		}
		if key != "" {
			s = strings.Replace(s, "[sql]\n", "[sql]\ntls_key = \""+key+"\"\n", 1)
		}
		return s
	}
	c, err := Parse([]byte(file(cert, key)))
	if err != nil || c.SQL.TLSCert != cert || c.SQL.TLSKey != key {
		t.Fatalf("valid pair: %+v, %v", c.SQL, err)
	}
	_, err = Parse([]byte(file(cert, "")))
	wantErrors(t, err, []string{"sql.tls_cert, sql.tls_key = \"" + cert + "\", \"\"", "want both", "or neither"})
	_, err = Parse([]byte(file("", key)))
	wantErrors(t, err, []string{"sql.tls_cert, sql.tls_key = \"\", \"" + key + "\"", "want both"})
	missing := filepath.Join(dir, "missing.pem")
	_, err = Parse([]byte(file(missing, key)))
	wantErrors(t, err, []string{"sql.tls_cert, sql.tls_key", "missing.pem", "cannot load them", "no such file"})
	// The pair swapped: both files exist but do not load as certificate and key.
	_, err = Parse([]byte(file(key, cert)))
	wantErrors(t, err, []string{"sql.tls_cert, sql.tls_key", "cannot load them"})
	// A key that does not match the certificate.
	_, otherKey := testenv.SelfSignedCert(t, t.TempDir())
	_, err = Parse([]byte(file(cert, otherKey)))
	wantErrors(t, err, []string{"sql.tls_cert, sql.tls_key", "cannot load them"})
}

func TestServeArgsSQL(t *testing.T) {
	file := writeFile(t, minimalSQL+"[admin]\nlisten = \"127.0.0.1:9104\"\n")
	c, err := ParseServeArgs([]string{"--config", file}, &bytes.Buffer{})
	if err != nil || c.SQL.Listen != "127.0.0.1:0" || c.Admin.Listen != "127.0.0.1:9104" {
		t.Fatalf("file only: sql.listen %q, admin.listen %q, %v", c.SQL.Listen, c.Admin.Listen, err)
	}
	c, err = ParseServeArgs([]string{"--sql-listen", "127.0.0.1:3307", "--config", file, "--admin-listen", ":9105"}, &bytes.Buffer{})
	if err != nil || c.SQL.Listen != "127.0.0.1:3307" || c.Admin.Listen != ":9105" {
		t.Fatalf("flags override: sql.listen %q, admin.listen %q, %v", c.SQL.Listen, c.Admin.Listen, err)
	}
	if len(c.SQL.Users) != 1 || len(c.Groups) != 1 {
		t.Fatalf("users and groups from the file lost: %+v", c)
	}
	// An empty flag turns the door (or the admin listener) off.
	c, err = ParseServeArgs([]string{"--config", file, "--sql-listen", "", "--admin-listen", ""}, &bytes.Buffer{})
	if err != nil || c.SQL.Listen != "" || c.Admin.Listen != "" {
		t.Fatalf("empty flags: sql.listen %q, admin.listen %q, %v", c.SQL.Listen, c.Admin.Listen, err)
	}

	_, err = ParseServeArgs([]string{"--sql-listen", "127.0.0.1:3306", "--admin-listen", "nowhere"}, &bytes.Buffer{})
	wantErrors(t, err,
		[]string{"sql.users = none"},
		[]string{"groups = none"},
		[]string{`admin.listen (--admin-listen) = "nowhere"`},
	)
	_, err = ParseServeArgs([]string{"--config", file, "--sql-listen", "3306"}, &bytes.Buffer{})
	wantErrors(t, err, []string{`sql.listen (--sql-listen) = "3306"`, "host:port"})

	// A wrong value in the file is reported once; a flag that then sets the key is validated on its own.
	bad := writeFile(t, "[[groups]]\nname = 1\nprimary = \"h:1\"\nuser = \"m\"\n[admin]\nlisten = 5\n")
	_, err = ParseServeArgs([]string{"--config", bad}, &bytes.Buffer{})
	wantErrors(t, err, []string{bad + ": groups[0].name = 1"}, []string{"admin.listen = 5"})
	_, err = ParseServeArgs([]string{"--config", bad, "--admin-listen", "x"}, &bytes.Buffer{})
	wantErrors(t, err, []string{bad + ": groups[0].name = 1"}, []string{"admin.listen = 5"}, []string{`admin.listen (--admin-listen) = "x"`})

	var stderr bytes.Buffer
	if _, err := ParseServeArgs([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"-sql-listen address", "-admin-listen address", "SQL door"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, stderr.String())
		}
	}
}

const containerGroups = `
[[groups]]
name = "g"
primary = "127.0.0.1:3306"
user = "m"

[[groups]]
name = "h"
primary = "127.0.0.1:3307"
user = "m"
`

func TestParseContainers(t *testing.T) {
	c, err := Parse([]byte(containerGroups + `
[[containers]]
name = "default"                # serves keys without a prefix
table = "test.demo_test"
key = "c1"
values = "c2"

[[containers]]
name = "aaa_1"
group = "h"
table = "shop.kv"
key = "k"
values = ["v1", "v2", "v$3"]
separator = ","
flags = "f"
cas = "c"
expiry = "e"
get = "db_only"
set = "db_only"
delete = "disabled"
flush = "db_only"
write = "async"
write_window = "250ms"
write_max_pending = 500

[[containers]]
name = "b"
table = "s.t"
key = "k"
values = " a , b,c "            # one string, comma-separated
flags = ""                      # no column
[migrate]
innodb_memcache = "h"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Container{
		{Name: "default", Group: "g", Table: "test.demo_test", Key: "c1", Values: []string{"c2"}, Separator: "|",
			Get: "caching", Set: "caching", Delete: "caching", Flush: "cache_only", Write: "sync", WriteWindow: 100 * time.Millisecond, WriteMaxPending: 16384},
		{Name: "aaa_1", Group: "h", Table: "shop.kv", Key: "k", Values: []string{"v1", "v2", "v$3"}, Separator: ",",
			Flags: "f", CAS: "c", Expiry: "e", Get: PolicyDBOnly, Set: PolicyDBOnly, Delete: PolicyDisabled,
			Flush: PolicyDBOnly, Write: WriteAsync, WriteWindow: 250 * time.Millisecond, WriteMaxPending: 500},
		{Name: "b", Group: "g", Table: "s.t", Key: "k", Values: []string{"a", "b", "c"}, Separator: "|",
			Get: "caching", Set: "caching", Delete: "caching", Flush: "cache_only", Write: "sync", WriteWindow: 100 * time.Millisecond, WriteMaxPending: 16384},
	}
	if !reflect.DeepEqual(c.Containers, want) {
		t.Errorf("containers =\n%+v\nwant\n%+v", c.Containers, want)
	}
	if c.Migrate.InnodbMemcache != "h" {
		t.Errorf("migrate = %+v, want innodb_memcache = h", c.Migrate)
	}
	// Groups alone, migrate alone: no containers are needed.
	c, err = Parse([]byte(containerGroups + "[migrate]\ninnodb_memcache = \"g\"\n"))
	if err != nil || c.Containers != nil || c.Migrate.InnodbMemcache != "g" {
		t.Errorf("migrate only: %+v, %v", c, err)
	}
	// migrate.innodb_memcache = "" is "no migration", like leaving it out.
	if _, err := Parse([]byte("[migrate]\ninnodb_memcache = \"\"\n")); err != nil {
		t.Errorf("innodb_memcache = \"\": %v", err)
	}
}

func TestEnsureDefaultsContainers(t *testing.T) {
	c := Config{
		Groups:     []Group{{Name: "one", Primary: "h:1", User: "m"}, {Name: "two", Primary: "h:2", User: "m"}},
		Containers: []Container{{Name: "a", Table: "s.t", Key: "k", Values: []string{"v"}}, {Name: "b", Group: "two", Table: "s.t", Key: "k", Values: []string{"v"}, Write: WriteAsync, Get: PolicyDBOnly}},
	}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	a := Container{Name: "a", Group: "one", Table: "s.t", Key: "k", Values: []string{"v"}, Separator: "|",
		Get: "caching", Set: "caching", Delete: "caching", Flush: "cache_only", Write: "sync", WriteWindow: 100 * time.Millisecond, WriteMaxPending: 16384}
	if !reflect.DeepEqual(c.Containers[0], a) {
		t.Errorf("container 0 = %+v, want %+v", c.Containers[0], a)
	}
	if b := c.Containers[1]; b.Group != "two" || b.Write != WriteAsync || b.Get != PolicyDBOnly || b.Set != PolicyCaching {
		t.Errorf("container 1 = %+v: kept values or defaults lost", b)
	}
}

func TestContainersEveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]byte(containerGroups + `
[[containers]]
name = "a.b"                    # a dot cannot be in @@name.
group = "nope"
table = "notable"
key = "my key"
values = ["ok", "bad-col", "123"]
flags = "f f"
cas = "1"
expiry = "` + strings.Repeat("x", 65) + `"
get = "cached"
set = "DB_ONLY"
delete = "none"
flush = "truncate"
write = "later"
write_window = "2m"
write_max_pending = 0

[[containers]]
name = "dup"
table = "a.b.c"
key = "k"
values = "v,,w"
set = "cache_only"
write = "async"

[[containers]]
name = "dup"                    # duplicate
table = ".t"
key = "k"
values = []

[[containers]]
table = "s."
key = "k"
values = "v"

[migrate]
innodb_memcache = "x"
`))
	wantErrors(t, err,
		[]string{`containers[0].name = "a.b"`, "letters, digits and _", "@@name.key"},
		[]string{`containers[0].group = "nope"`, "[[groups]] entry", `"g", "h"`},
		[]string{`containers[0].table = "notable"`, `"schema.table"`},
		[]string{`containers[0].key = "my key"`, "key column"},
		[]string{`containers[0].values[1] = "bad-col"`, "column name"},
		[]string{`containers[0].values[2] = "123"`, "column name"},
		[]string{`containers[0].flags = "f f"`, `"" for none`},
		[]string{`containers[0].cas = "1"`},
		[]string{`containers[0].expiry = "xxx`, "at most 64"},
		[]string{`containers[0].get = "cached"`, `"cache_only", "db_only", "caching" or "disabled"`},
		[]string{`containers[0].set = "DB_ONLY"`},
		[]string{`containers[0].delete = "none"`},
		[]string{`containers[0].flush = "truncate"`},
		[]string{`containers[0].write = "later"`, `"sync"`, `"async"`},
		[]string{`containers[0].write_window = "2m0s"`, `"1ms" to "1m"`},
		[]string{`containers[0].write_max_pending = 0`, "from 1 to 1048576"},
		[]string{`containers[1].table = "a.b.c"`, `"schema.table"`},
		[]string{`containers[1].values[1] = ""`, "column name"},
		[]string{`containers[1].write = "async"`, `needs set = "caching" or "db_only"`, `(set is "cache_only")`},
		[]string{`containers[2].name = "dup"`, "unique", "containers[1] has it already"},
		[]string{`containers[2].table = ".t"`},
		[]string{`containers[2].values = []`, "one or more column names"},
		[]string{`containers[3].name = ""`, "letters, digits and _"},
		[]string{`containers[3].table = "s."`},
		[]string{`migrate.innodb_memcache = "x"`, "innodb_memcache schema", `"g", "h"`},
	)
}

// A "" written in the file is an error where it is not a valid value, not a request for the default.
func TestContainersExplicitZero(t *testing.T) {
	_, err := Parse([]byte(containerGroups + `
[[containers]]
name = ""
group = ""
table = ""
key = ""
values = ""
separator = ""
flags = ""                      # valid: no column
cas = ""
expiry = ""
get = ""
set = ""
delete = ""
flush = ""
write = ""
`))
	wantErrors(t, err,
		[]string{`containers[0].name = ""`},
		[]string{`containers[0].group = ""`, `"g", "h"`},
		[]string{`containers[0].table = ""`},
		[]string{`containers[0].key = ""`},
		[]string{`containers[0].values = []`},
		[]string{`containers[0].separator = ""`, "non-empty"},
		[]string{`containers[0].get = ""`},
		[]string{`containers[0].set = ""`},
		[]string{`containers[0].delete = ""`},
		[]string{`containers[0].flush = ""`},
		[]string{`containers[0].write = ""`},
	)
}

func TestContainersWrongTypes(t *testing.T) {
	_, err := Parse([]byte(containerGroups + `
[[containers]]
name = 1
group = 2
table = ["s", "t"]
key = { c = 1 }
values = ["v", 3]
separator = 124
get = true
write = false
[[containers]]
name = "b"
table = "s.t"
key = "k"
values = 5
[migrate]
innodb_memcache = 1
`))
	wantErrors(t, err,
		[]string{"containers[0].name = 1", "letters, digits and _"},
		[]string{"containers[0].group = 2", "[[groups]] entry"},
		[]string{"containers[0].table = an array", `"schema.table"`},
		[]string{"containers[0].key = a table", "key column"},
		[]string{"containers[0].values = an array", "one or more column names", "(not 3)"},
		[]string{"containers[0].separator = 124", "non-empty string"},
		[]string{"containers[0].get = true", `"cache_only"`},
		[]string{"containers[0].write = false", `"sync"`},
		[]string{"containers[1].values = 5", "one or more column names"},
		[]string{"migrate.innodb_memcache = 1", "[[groups]] entry"},
		// The keys not decoded are left empty: reported once, above, not again by Validate.
	)
	for _, data := range []string{"containers = 5\n", "containers = [1]\n", "migrate = 5\n"} {
		_, err := Parse([]byte(data))
		if err == nil || !strings.Contains(err.Error(), "line") {
			t.Errorf("Parse(%q) = %v; want a structural error with its line", data, err)
		}
	}
}

func TestContainersUnknownKeys(t *testing.T) {
	_, err := Parse([]byte(containerGroups + `
[[containers]]
name = "a"
table = "s.t"
key = "k"
values = "v"
[[containers]]
name = "b"
table = "s.t"
key = "k"
value = "v"
[migrate]
innodb = "g"
[cache]
x = 1
[kache]
`))
	wantErrors(t, err,
		[]string{"unknown key containers[1].value:",
			"[[containers]] allows name, group, table, key, values, separator, flags, cas, expiry, get, set, delete, flush, write"},
		[]string{"unknown key migrate.innodb:", "[migrate] allows innodb_memcache"},
		[]string{"unknown key cache.x:", "[cache] allows max_staleness, binlog_server_id, enabled, memory_limit"},
		[]string{"unknown key kache:", "the top level allows [memcache], [store], [sql], [[groups]], [admin], [[containers]], [migrate], [cache]"},
		[]string{"containers[1].values = []"},
	)
}

func TestContainersNeedGroups(t *testing.T) {
	_, err := Parse([]byte(`
[[containers]]
name = "default"
table = "s.t"
key = "k"
values = "v"
[migrate]
innodb_memcache = "g"
`))
	wantErrors(t, err,
		[]string{"groups = none", "[[containers]] need at least one [[groups]] entry"},
		[]string{`migrate.innodb_memcache = "g"`, "no [[groups]] entry is configured"},
	)
	// A first group without a name: reported once, on the group, not again on the container that defaulted to it.
	_, err = Parse([]byte(`
[[groups]]
primary = "h:1"
user = "m"
[[containers]]
name = "a"
table = "s.t"
key = "k"
values = "v"
`))
	wantErrors(t, err, []string{`groups[0].name = ""`})
}

func TestValidIdentifier(t *testing.T) {
	for s, want := range map[string]bool{
		"c1": true, "_": true, "$x": true, "1a": true, "Ünïcode": true, strings.Repeat("a", 64): true,
		"": false, "123": false, "a b": false, "a-b": false, "a.b": false, "`a`": false, strings.Repeat("a", 65): false,
	} {
		if got := validIdentifier(s); got != want {
			t.Errorf("validIdentifier(%q) = %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{
		"default": true, "aaa": true, "A_1": true, "9": true,
		"": false, "a.b": false, "a b": false, "a-b": false, "@@a": false, "é": false,
	} {
		if got := validContainerName(s); got != want {
			t.Errorf("validContainerName(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestSafetyKeys: the keys that bound abusive clients parse, take their defaults, and refuse what cannot work.
func TestSafetyKeys(t *testing.T) {
	c, err := Parse([]byte(`
[memcache]
write_timeout = "5s"
max_inflight_bytes = "16m"
[sql]
max_handshakes = 8
handshake_timeout = "3s"
max_auth_failures = 20
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Memcache.WriteTimeout != 5*time.Second || c.Memcache.MaxInflightBytes != 16<<20 || c.SQL.MaxHandshakes != 8 ||
		c.SQL.HandshakeTimeout != 3*time.Second || c.SQL.MaxAuthFailures != 20 || c.SQL.RequireTLS {
		t.Fatalf("parsed %+v %+v", c.Memcache, c.SQL)
	}
	_, err = Parse([]byte(`
[memcache]
write_timeout = "0s"
max_inflight_bytes = -1
[sql]
require_tls = true
max_handshakes = 0
max_auth_failures = -1
`))
	for _, key := range []string{"memcache.write_timeout", "memcache.max_inflight_bytes", "sql.require_tls", "sql.max_handshakes", "sql.max_auth_failures"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("want a problem naming %s, got %v", key, err)
		}
	}
}

// listen = "" in the file turns the memcache door off; without the key the default stays; -l and -p turn a door
// the file turned off on again.
func TestMemcacheListenOff(t *testing.T) {
	c, err := Parse([]byte("[memcache]\nlisten = \"\"\n"))
	if err != nil || c.Memcache.Listen != "" {
		t.Fatalf(`listen = "": listen %q, %v; want "" (door off)`, c.Memcache.Listen, err)
	}
	c, err = Parse([]byte("[memcache]\nmax_connections = 10\n"))
	if err != nil || c.Memcache.Listen != defaultListen {
		t.Fatalf("no listen key: listen %q, %v; want %q", c.Memcache.Listen, err, defaultListen)
	}
	off := writeFile(t, "[memcache]\nlisten = \"\"\n")
	c, err = ParseServeArgs([]string{"--config", off}, &bytes.Buffer{})
	if err != nil || c.Memcache.Listen != "" {
		t.Fatalf("serve --config (listen off): listen %q, %v", c.Memcache.Listen, err)
	}
	c, err = ParseServeArgs([]string{"--config", off, "-p", "11311"}, &bytes.Buffer{})
	if err != nil || c.Memcache.Listen != "127.0.0.1:11311" {
		t.Fatalf("serve --config (listen off) -p 11311: listen %q, %v", c.Memcache.Listen, err)
	}
}

func TestMemcacheTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := testenv.SelfSignedCert(t, dir)
	file := func(cert, key string) string {
		s := "[memcache]\n"
		if cert != "" {
			s += "tls_cert = \"" + cert + "\"\n"
		}
		if key != "" {
			s += "tls_key = \"" + key + "\"\n"
		}
		return s
	}
	c, err := Parse([]byte(file(cert, key)))
	if err != nil || c.Memcache.TLSCert != cert || c.Memcache.TLSKey != key {
		t.Fatalf("valid pair: %+v, %v", c.Memcache, err)
	}
	_, err = Parse([]byte(file(cert, "")))
	wantErrors(t, err, []string{"memcache.tls_cert, memcache.tls_key = \"" + cert + "\", \"\"", "want both", "or neither"})
	_, err = Parse([]byte(file("", key)))
	wantErrors(t, err, []string{"memcache.tls_cert, memcache.tls_key = \"\", \"" + key + "\"", "want both"})
	_, err = Parse([]byte(file(key, cert)))
	wantErrors(t, err, []string{"memcache.tls_cert, memcache.tls_key", "cannot load them"})
	_, err = Parse([]byte("[memcache]\ntls_cert = 1\ntls_key = \"" + key + "\"\n"))
	wantErrors(t, err, []string{"memcache.tls_cert = 1", "PEM file"}, []string{"memcache.tls_cert, memcache.tls_key", "want both"})
}

func TestMemcacheAuthFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "auth")
	if err := os.WriteFile(good, []byte("alice:s3cret:with colon\r\n\nbob:\ncarol:pw"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte("[memcache]\nauth_file = \"" + good + "\"\n"))
	if err != nil || c.Memcache.AuthFile != good {
		t.Fatalf("valid auth_file: %+v, %v", c.Memcache, err)
	}
	users, err := ReadAuthFile(good)
	want := []AuthUser{{"alice", "s3cret:with colon"}, {"bob", ""}, {"carol", "pw"}}
	if err != nil || !reflect.DeepEqual(users, want) {
		t.Fatalf("ReadAuthFile = %+v, %v; want %+v", users, err, want)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("alice:x\nhunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Parse([]byte("[memcache]\nauth_file = \"" + bad + "\"\n"))
	wantErrors(t, err, []string{"memcache.auth_file", "line 2 is not", "user:password"})
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the error shows the line's content (a password, maybe): %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Parse([]byte("[memcache]\nauth_file = \"" + empty + "\"\n"))
	wantErrors(t, err, []string{"memcache.auth_file", "no \"user:password\" line"})
	_, err = Parse([]byte("[memcache]\nauth_file = \"" + filepath.Join(dir, "missing") + "\"\n"))
	wantErrors(t, err, []string{"memcache.auth_file", "no such file"})
	_, err = Parse([]byte("[memcache]\nauth_file = [\"x\"]\n"))
	wantErrors(t, err, []string{"memcache.auth_file = an array", "user:password"})
}

func TestCacheAndInvalidate(t *testing.T) {
	c, err := Parse([]byte(containerGroups + `
[cache]
max_staleness = "250ms"
binlog_server_id = 77
default_ttl = "30s"
[[cache.rules]]
table = "shop.products"
[[cache.rules]]
regex = "from .reports."
ttl = "5s"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cache.MaxStaleness != 250*time.Millisecond || c.Cache.BinlogServerID != 77 || c.Groups[0].Invalidate != InvalidateAuto ||
		len(c.Cache.Rules) != 2 || c.Cache.Rules[0].Table != "shop.products" || c.Cache.Rules[1].TTL != 5*time.Second || c.Cache.DefaultTTL != 30*time.Second {
		t.Fatalf("cache %+v, invalidate %q", c.Cache, c.Groups[0].Invalidate)
	}
	_, err = Parse([]byte(`
[[groups]]
name = "g"
primary = "127.0.0.1:3306"
user = "u"
invalidate = "sometimes"
[cache]
max_staleness = "0s"
binlog_server_id = -3
[[cache.rules]]
table = "t"
regex = "x"
`))
	wantErrors(t, err,
		[]string{"cache.binlog_server_id = -3", "4294967295"},
		[]string{"cache.rules[0]", "exactly one of digest"},
		[]string{"cache.max_staleness", "positive duration"},
		[]string{`groups[0].invalidate = "sometimes"`, `want "binlog", "ttl", "none"`},
	)
}

func TestAdminTokenAndMetricsPublic(t *testing.T) {
	c, err := Parse([]byte("[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"0123456789abcdef-token\"\nmetrics_public = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Token != "0123456789abcdef-token" || !c.Admin.MetricsPublic {
		t.Fatalf("admin = %+v", c.Admin)
	}
	if c, err := Parse([]byte("[admin]\nlisten = \"127.0.0.1:0\"\n")); err != nil || c.Admin.Token != "" || c.Admin.MetricsPublic {
		t.Fatalf("defaults: admin = %+v, %v", c.Admin, err)
	}
	// A bad token is reported without showing it: the message may reach a log.
	for _, bad := range []string{`"short-Secret"`, `"has a Secret space in it"`, `1234567890123456789`} {
		_, err := Parse([]byte("[admin]\ntoken = " + bad + "\n"))
		wantErrors(t, err, []string{"admin.token = (hidden)", "at least 16 printable"})
		if err != nil && (strings.Contains(err.Error(), "Secret") || strings.Contains(err.Error(), "123456789")) {
			t.Errorf("the error shows the token: %v", err)
		}
	}
	_, err = Parse([]byte("[admin]\nmetrics_public = \"yes\"\n"))
	wantErrors(t, err, []string{`admin.metrics_public = "yes"`, "true or false"})
}

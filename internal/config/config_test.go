package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	want := Config{
		Memcache: Memcache{
			Listen:         "127.0.0.1:11211",
			MemoryLimit:    64 << 20,
			MaxConnections: 1024,
			MaxItemSize:    1 << 20,
		},
		Store: Store{
			DataDir:       "",
			Durability:    "none",
			FlushInterval: time.Second,
		},
	}
	c := Default()
	if c != want {
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
		if c != want {
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
		Memcache: Memcache{Listen: "0.0.0.0:22122", MemoryLimit: 512 << 20, MaxConnections: 4096, MaxItemSize: 2 << 20},
		Store:    Store{DataDir: "/var/lib/keyway", Durability: "sync", FlushInterval: 250 * time.Millisecond},
	}
	if c != want {
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
		{"section", "[sql]\nlisten = \"x\"\nport = 3306\n",
			[]string{"unknown key sql:", "the top level allows [memcache], [store]"}},
		{"key at top level", "listen = \"127.0.0.1:1\"\n",
			[]string{"unknown key listen:", "the top level allows [memcache], [store]"}},
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
listen = ""
memory_limit = 0
max_connections = 0
max_item_size = "0k"
[store]
flush_interval = "0s"
`))
	wantErrors(t, err,
		[]string{"memcache.listen (-l, -p) = \"\""},
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
			c.Memcache = Memcache{Listen: "127.0.0.1:11311", MemoryLimit: 256 << 20, MaxConnections: 50, MaxItemSize: 2 << 20}
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
			c.Memcache = Memcache{Listen: "10.0.0.1:5000", MemoryLimit: 128 << 20, MaxConnections: 100, MaxItemSize: 512 << 10}
			c.Store.DataDir, c.Store.Durability = "/from/file", "sync"
		}},
		{"flags override file", []string{"-p", "6000", "-c", "7", "-config", file, "--durability", "async", "--data-dir", "/from/flag"}, func(c *Config) {
			c.Memcache = Memcache{Listen: "10.0.0.1:6000", MemoryLimit: 128 << 20, MaxConnections: 7, MaxItemSize: 512 << 10}
			c.Store.DataDir, c.Store.Durability = "/from/flag", "async"
		}},
		{"-l keeps file port", []string{"--config", file, "-l", "127.0.0.1"}, func(c *Config) {
			c.Memcache = Memcache{Listen: "127.0.0.1:5000", MemoryLimit: 128 << 20, MaxConnections: 100, MaxItemSize: 512 << 10}
			c.Store.DataDir, c.Store.Durability = "/from/file", "sync"
		}},
		{"empty data dir flag turns persistence off", []string{"--config", file, "--data-dir", "", "--durability", "none"}, func(c *Config) {
			c.Memcache = Memcache{Listen: "10.0.0.1:5000", MemoryLimit: 128 << 20, MaxConnections: 100, MaxItemSize: 512 << 10}
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
			if got != want {
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
		{"unknown flag", []string{"-d"}, [][]string{{"flag provided but not defined: -d"}}},
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

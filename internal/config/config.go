// Package config turns keyway's TOML file and the flags of `keyway serve` into one validated Config.
//
// Invariants:
//   - A Config that came out of Parse, LoadFile or ParseServeArgs has every default filled in and has passed
//     Validate; the rest of keyway never re-checks it.
//   - A zero field means "use the default" (EnsureDefaults fills it). A value the user wrote is never replaced by
//     a default: Parse and ParseServeArgs start from the defaults and apply the file and flags on top, so an
//     explicit 0 in the file or on the command line reaches Validate and is rejected there.
//   - Unknown keys are errors, never ignored: a misspelt key would otherwise silently leave a default in force.
//   - Every error names the key (and the serve flag that sets it, if any) and says what is allowed. Validate and
//     the file decoder report every problem at once, joined with errors.Join, one problem per line.
//
// Adding a section ([sql], [[groups]], [admin], …) is: a field in Config, its mirror in fileConfig (file.go), and
// its ensureDefaults and validate methods called from EnsureDefaults and Validate.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Config is keyway's whole configuration.
type Config struct {
	Memcache Memcache // [memcache]
	Store    Store    // [store]
}

// Memcache configures the memcache door.
type Memcache struct {
	Listen         string // "listen": host:port; empty host = all interfaces, port 0 = any free port
	MemoryLimit    int64  // "memory_limit" in bytes: memory for items in the local store
	MaxConnections int    // "max_connections": concurrent client connections
	MaxItemSize    int64  // "max_item_size" in bytes: the largest value a client may store
}

// Store configures the local store's persistence.
type Store struct {
	DataDir       string        // "data_dir": where the store persists; "" = nothing is persisted
	Durability    string        // "durability": DurabilityNone, DurabilityAsync or DurabilitySync
	FlushInterval time.Duration // "flush_interval": how often async durability writes behind
}

// The values of Store.Durability.
const (
	DurabilityNone  = "none"  // nothing is written to data_dir
	DurabilityAsync = "async" // acknowledged from memory, written to data_dir every flush_interval
	DurabilitySync  = "sync"  // acknowledged only once written to data_dir
)

// Units for byte sizes. keyway follows memcached: every unit is a power of 1024, so "64MB" means 64 MiB.
const (
	kib int64 = 1 << 10
	mib int64 = 1 << 20
	gib int64 = 1 << 30
)

// Defaults and limits. The want* texts below quote these numbers: change both together.
const (
	defaultListen         = "127.0.0.1:11211"
	defaultMemoryLimit    = 64 * mib
	defaultMaxConnections = 1024
	defaultMaxItemSize    = 1 * mib
	defaultFlushInterval  = time.Second

	minMemoryLimit    = 1 * mib
	maxMaxConnections = 1 << 20
	minMaxItemSize    = 1 * kib // memcached -I: between 1k and 1024m
	maxMaxItemSize    = 1 * gib
	maxFlushInterval  = time.Hour
)

// What each key allows, as said in errors.
const (
	wantListen         = `want "host:port", e.g. "127.0.0.1:11211" (empty host = all interfaces, port 0 = any free port)`
	wantMemoryLimit    = `want megabytes as an integer (64) or a size with unit ("64MB", "1GiB", "512k"), at least 1 MiB`
	wantMaxConnections = `want an integer from 1 to 1048576`
	wantMaxItemSize    = `want bytes as an integer (1048576) or a size with unit ("1m", "2MB"), from 1 KiB to 1 GiB`
	wantDataDir        = `want a directory path, or "" for no persistence`
	wantDurability     = `want "none", "async" or "sync"`
	wantFlushInterval  = `want a duration like "1s" or "250ms", more than 0 and at most 1h`
)

// Default returns the configuration keyway runs with when nothing is configured: a memcached on 127.0.0.1:11211
// that persists nothing.
func Default() Config {
	var c Config
	c.EnsureDefaults()
	return c
}

// EnsureDefaults sets every zero field to its default. Store.Durability defaults to "async" when Store.DataDir is
// set and to "none" otherwise, so set DataDir before calling it.
func (c *Config) EnsureDefaults() {
	c.Memcache.ensureDefaults()
	c.Store.ensureDefaults()
}

func (m *Memcache) ensureDefaults() {
	if m.Listen == "" {
		m.Listen = defaultListen
	}
	if m.MemoryLimit == 0 {
		m.MemoryLimit = defaultMemoryLimit
	}
	if m.MaxConnections == 0 {
		m.MaxConnections = defaultMaxConnections
	}
	if m.MaxItemSize == 0 {
		m.MaxItemSize = defaultMaxItemSize
	}
}

func (s *Store) ensureDefaults() {
	s.deriveDefaults()
	if s.FlushInterval == 0 {
		s.FlushInterval = defaultFlushInterval
	}
}

// Validate reports every problem in c at once, one per line, each naming its key and what is allowed. It expects
// EnsureDefaults to have run: a zero field is reported as invalid.
func (c *Config) Validate() error {
	var p problems
	c.Memcache.validate(&p)
	c.Store.validate(&p)
	return errors.Join(p...)
}

func (m *Memcache) validate(p *problems) {
	if !validListen(m.Listen) {
		p.add("memcache.listen (-l, -p)", strconv.Quote(m.Listen), wantListen)
	}
	if m.MemoryLimit < minMemoryLimit {
		p.add("memcache.memory_limit (-m)", formatBytes(m.MemoryLimit), wantMemoryLimit)
	}
	if m.MaxConnections < 1 || m.MaxConnections > maxMaxConnections {
		p.add("memcache.max_connections (-c)", strconv.Itoa(m.MaxConnections), wantMaxConnections)
	}
	if m.MaxItemSize < minMaxItemSize || m.MaxItemSize > maxMaxItemSize {
		p.add("memcache.max_item_size (-I)", formatBytes(m.MaxItemSize), wantMaxItemSize)
	}
}

// validListen accepts host:port with a numeric port. The host is not resolved here: that is the listener's job,
// and a name that does not resolve yet may resolve at start.
func validListen(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// deriveDefaults fills the defaults that depend on other fields.
func (s *Store) deriveDefaults() {
	if s.Durability == "" {
		s.Durability = DurabilityNone
		if s.DataDir != "" {
			s.Durability = DurabilityAsync
		}
	}
}

func (s *Store) validate(p *problems) {
	switch s.Durability {
	case DurabilityNone:
	case DurabilityAsync, DurabilitySync:
		// data_dir with durability "none" is allowed (it keeps nothing), but not the other way round.
		if s.DataDir == "" {
			p.add("store.durability (--durability)", strconv.Quote(s.Durability),
				`needs store.data_dir (--data-dir): set a data directory, or set durability = "none"`)
		}
	default:
		p.add("store.durability (--durability)", strconv.Quote(s.Durability), wantDurability)
	}
	if s.FlushInterval <= 0 || s.FlushInterval > maxFlushInterval {
		p.add("store.flush_interval", strconv.Quote(s.FlushInterval.String()), wantFlushInterval)
	}
}

// Parse reads a TOML configuration, fills in defaults and validates it. It reports every problem at once:
// unknown keys, values of the wrong form and values out of range.
func Parse(data []byte) (Config, error) {
	c := start()
	problems, err := decodeFile(&c, data)
	if err != nil {
		return Config{}, err
	}
	c.finish()
	if err := errors.Join(append(problems, c.Validate())...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadFile is Parse on the contents of the file at path; errors in the file are prefixed with its path.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// start is what the file and flags are applied on: the defaults, except those that depend on other fields
// (Store.Durability on data_dir), which finish derives afterwards.
func start() Config {
	c := Default()
	c.Store.Durability = ""
	return c
}

// finish derives the remaining defaults once the file and flags are applied. It is EnsureDefaults for a Config
// that came from start, but leaves alone a 0 the user wrote, so that Validate rejects it rather than EnsureDefaults
// silently replacing it.
func (c *Config) finish() {
	c.Store.deriveDefaults()
}

// problems collects errors of the form "key = value: what is allowed".
type problems []error

func (p *problems) add(key, value, want string) {
	*p = append(*p, fmt.Errorf("%s = %s: %s", key, value, want))
}

// formatBytes shows n in the largest binary unit that divides it exactly, so an error repeats what the user wrote.
func formatBytes(n int64) string {
	switch {
	case n != 0 && n%gib == 0:
		return strconv.FormatInt(n/gib, 10) + " GiB"
	case n != 0 && n%mib == 0:
		return strconv.FormatInt(n/mib, 10) + " MiB"
	case n != 0 && n%kib == 0:
		return strconv.FormatInt(n/kib, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

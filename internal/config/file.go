package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// fileConfig is the layout of the TOML file: one field per section, tagged with the section's name.
//
// Every leaf is `any` so that the TOML decoder never stops at a value of the wrong type: the decoder below reports
// it with the key and the allowed form, alongside every other problem. A field left nil was not in the file.
type fileConfig struct {
	Memcache memcacheFile `toml:"memcache"`
	Store    storeFile    `toml:"store"`
}

type memcacheFile struct {
	Listen         any `toml:"listen"`
	MemoryLimit    any `toml:"memory_limit"`
	MaxConnections any `toml:"max_connections"`
	MaxItemSize    any `toml:"max_item_size"`
}

type storeFile struct {
	DataDir       any `toml:"data_dir"`
	Durability    any `toml:"durability"`
	FlushInterval any `toml:"flush_interval"`
}

func (f *fileConfig) applyTo(c *Config, d *decoder) {
	f.Memcache.applyTo(&c.Memcache, d)
	f.Store.applyTo(&c.Store, d)
}

func (f *memcacheFile) applyTo(m *Memcache, d *decoder) {
	d.str("memcache.listen", f.Listen, wantListen, &m.Listen)
	d.size("memcache.memory_limit", f.MemoryLimit, mib, wantMemoryLimit, &m.MemoryLimit) // an integer is megabytes, like memcached -m
	d.integer("memcache.max_connections", f.MaxConnections, wantMaxConnections, &m.MaxConnections)
	d.size("memcache.max_item_size", f.MaxItemSize, 1, wantMaxItemSize, &m.MaxItemSize)
}

func (f *storeFile) applyTo(s *Store, d *decoder) {
	d.str("store.data_dir", f.DataDir, wantDataDir, &s.DataDir)
	d.str("store.durability", f.Durability, wantDurability, &s.Durability)
	d.duration("store.flush_interval", f.FlushInterval, wantFlushInterval, &s.FlushInterval)
}

// decodeFile applies the keys present in data onto c. A TOML syntax error is returned as err and nothing else is
// reported; otherwise every unknown key and every value of the wrong form is returned in problems, and the keys
// with such values are left as they were in c.
func decodeFile(c *Config, data []byte) (problems []error, err error) {
	var f fileConfig
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, err
	}
	d := &decoder{}
	reported := make(map[string]bool)
	for _, key := range md.Undecoded() {
		if err := unknownKey(key, reported); err != nil {
			d.problems = append(d.problems, err)
		}
	}
	f.applyTo(c, d)
	return d.problems, nil
}

// unknownKey explains an undecoded key: the first part of it that fileConfig does not have, and what is allowed
// in its place. It returns nil when that part was already reported (TOML lists a table and then each key in it)
// and for keys below an `any` leaf, whose value the decoder reports as being of the wrong type.
func unknownKey(key toml.Key, reported map[string]bool) error {
	t := reflect.TypeFor[fileConfig]()
	where := "the top level"
	for i, part := range key {
		for t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		f, ok := fieldByTag(t, part)
		if !ok {
			unknown := key[:i+1].String()
			if reported[unknown] {
				return nil
			}
			reported[unknown] = true
			return fmt.Errorf("unknown key %s: %s allows %s", unknown, where, strings.Join(allowedKeys(t), ", "))
		}
		t = f.Type
		where = "[" + key[:i+1].String() + "]"
	}
	return nil
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Tag.Get("toml") == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// allowedKeys lists the keys of a file struct as they are written in TOML: [section], [[array]] or key.
func allowedKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("toml")
		switch {
		case f.Type.Kind() == reflect.Struct:
			name = "[" + name + "]"
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			name = "[[" + name + "]]"
		}
		keys = append(keys, name)
	}
	return keys
}

// decoder converts raw TOML values to Config fields. Each method does nothing for nil (the key is absent); for a
// value of the wrong form it records a problem naming the key and what is allowed, and leaves dst alone.
type decoder struct {
	problems problems
}

func (d *decoder) str(key string, v any, want string, dst *string) {
	if v == nil {
		return
	}
	s, ok := v.(string)
	if !ok {
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = s
}

func (d *decoder) integer(key string, v any, want string, dst *int) {
	if v == nil {
		return
	}
	n, ok := v.(int64)
	if !ok || n != int64(int(n)) {
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = int(n)
}

// size accepts an integer in units of intUnit, or a string parsed by parseSize with the same unit for a bare number.
func (d *decoder) size(key string, v any, intUnit int64, want string, dst *int64) {
	var n int64
	ok := false
	switch v := v.(type) {
	case nil:
		return
	case int64:
		n, ok = multiply(v, intUnit)
	case string:
		n, ok = parseSize(v, intUnit)
	}
	if !ok {
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = n
}

func (d *decoder) duration(key string, v any, want string, dst *time.Duration) {
	if v == nil {
		return
	}
	s, ok := v.(string)
	if !ok {
		d.problems.add(key, showTOML(v), want)
		return
	}
	t, err := time.ParseDuration(s)
	if err != nil {
		d.problems.add(key, showTOML(v), want)
		return
	}
	*dst = t
}

// showTOML shows a decoded TOML value in an error, close to how it was written.
func showTOML(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case map[string]any:
		return "a table"
	case []any, []map[string]any:
		return "an array"
	}
	return fmt.Sprint(v)
}

// parseSize parses a byte size as memcached's -I does, and a little more: a whole number, then optionally a unit.
// Units are case-insensitive and all powers of 1024: b; k, kb, kib; m, mb, mib; g, gb, gib. A bare number is in
// units of bare (1 for bytes, mib for megabytes). Callers say what is allowed, so it only reports ok.
func parseSize(s string, bare int64) (n int64, ok bool) {
	s = strings.TrimSpace(s)
	digits := 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' {
		digits++
	}
	n, err := strconv.ParseInt(s[:digits], 10, 64)
	if err != nil {
		return 0, false
	}
	var unit int64
	switch strings.ToLower(strings.TrimSpace(s[digits:])) {
	case "":
		unit = bare
	case "b":
		unit = 1
	case "k", "kb", "kib":
		unit = kib
	case "m", "mb", "mib":
		unit = mib
	case "g", "gb", "gib":
		unit = gib
	default:
		return 0, false
	}
	return multiply(n, unit)
}

// multiply returns n*unit, or false if that overflows.
func multiply(n, unit int64) (int64, bool) {
	if n > math.MaxInt64/unit || n < math.MinInt64/unit {
		return 0, false
	}
	return n * unit, true
}

package config

import (
	"reflect"
	"strconv"
	"strings"
	"unicode"
)

// Reloadable are the keys a running keyway applies again when it reloads its file (SIGHUP): the SQL door's users
// and the cache rules. Every other key takes a restart: among them every key of [[groups]], replicas, read_from and
// max_replica_lag included, since the backend groups and their members are built once, at start.
var Reloadable = []string{"sql.users", "cache.rules", "cache.default_ttl", "shard_maps"}

// IsReloadable reports whether key (as Changed names it) is one of Reloadable or lies under one.
func IsReloadable(key string) bool {
	for _, r := range Reloadable {
		if key == r || strings.HasPrefix(key, r+"[") || strings.HasPrefix(key, r+".") {
			return true
		}
	}
	return false
}

// Changed names the keys whose values differ between old and new, as they are written in the file:
// "memcache.listen", "groups[1].password". An array of tables whose length changed is named as a whole ("groups").
// Only names are returned, never values: a changed password is said to have changed, nothing more.
func Changed(old, new Config) []string {
	var out []string
	changed(reflect.ValueOf(old), reflect.ValueOf(new), "", &out)
	return out
}

func changed(a, b reflect.Value, key string, out *[]string) {
	switch {
	case a.Type() == reflect.TypeFor[[]Replica]():
		// One key in the file (replicas = [...]), whose entries may be strings: named as a whole.
		if (a.Len() != 0 || b.Len() != 0) && !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, key)
		}
	case a.Kind() == reflect.Struct && a.Type() != reflect.TypeFor[struct{}]():
		for i := range a.NumField() {
			name := fileKeyName(a.Type().Field(i).Name)
			if key != "" {
				name = key + "." + name
			}
			changed(a.Field(i), b.Field(i), name, out)
		}
	case a.Kind() == reflect.Slice && a.Type().Elem().Kind() == reflect.Struct:
		if a.Len() != b.Len() {
			*out = append(*out, key)
			return
		}
		for i := range a.Len() {
			changed(a.Index(i), b.Index(i), key+"["+strconv.Itoa(i)+"]", out)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, key)
		}
	}
}

// fileKeyOverrides are the Config fields whose file key is not their name in lower_snake case.
var fileKeyOverrides = map[string]string{
	"TLSCA":    "tls_ca",
	"Disabled": "enabled", // Cache.Disabled is enabled = false
}

// fileKeyName is the file's key for a Config field: its name in lower_snake case ("MaxItemSize" is
// "max_item_size", "TLSCert" is "tls_cert"), or its override.
func fileKeyName(field string) string {
	if k, ok := fileKeyOverrides[field]; ok {
		return k
	}
	r := []rune(field)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// FileKeys lists every key the file accepts, arrays of tables without an index: "memcache.listen",
// "groups.name", "cache.rules.ttl". It is read off the file's layout (fileConfig), so it is always complete.
func FileKeys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name := prefix + f.Tag.Get("toml")
			ft := f.Type
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft, name+".")
				continue
			}
			out = append(out, name)
		}
	}
	walk(reflect.TypeFor[fileConfig](), "")
	return out
}

package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestChangedNamesFileKeys: every field of Config, changed alone, is named by Changed as exactly one key, and that
// key is one the file has. A field added to Config whose name does not turn into its file key fails here, so the
// reload log never names a key the user cannot find.
func TestChangedNamesFileKeys(t *testing.T) {
	keys := FileKeys()
	var leaves func(v reflect.Value, path []int)
	var base Config
	// One entry in every array of tables, so their fields are reached.
	base.Groups = []Group{{Replicas: []Replica{{}}}}
	base.SQL.Users = []SQLUser{{}}
	base.Containers = []Container{{}}
	base.Cache.Rules = []CacheRule{{}}
	base.ShardMaps = []ShardMap{{Tables: []ShardTable{{}}, Shards: []ShardRange{{}}}}
	checked := 0
	leaves = func(v reflect.Value, path []int) {
		switch {
		case v.Kind() == reflect.Struct:
			for i := range v.NumField() {
				leaves(v.Field(i), append(slices.Clone(path), i))
			}
		case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
			leaves(v.Index(0), append(slices.Clone(path), -1))
		default:
			changedCfg := deepCopy(base)
			leaf := reflect.ValueOf(&changedCfg).Elem()
			for _, i := range path {
				if i == -1 {
					leaf = leaf.Index(0)
				} else {
					leaf = leaf.Field(i)
				}
			}
			perturb(t, leaf)
			got := Changed(base, changedCfg)
			if len(got) != 1 {
				t.Fatalf("changing %v: Changed = %q, want one key", path, got)
			}
			bare := regexp.MustCompile(`\[\d+\]`).ReplaceAllString(got[0], "")
			if !slices.Contains(keys, bare) {
				t.Errorf("Changed names %q (%s), which is not a key of the file: rename the field or add it to fileKeyOverrides", got[0], bare)
			}
			checked++
		}
	}
	leaves(reflect.ValueOf(base), nil)
	if checked < 50 {
		t.Fatalf("only %d fields checked", checked)
	}
	if got := Changed(base, base); len(got) != 0 {
		t.Fatalf("Changed(c, c) = %q", got)
	}
	longer := deepCopy(base)
	longer.Groups = append(longer.Groups, Group{})
	if got := Changed(base, longer); !slices.Equal(got, []string{"groups"}) {
		t.Fatalf("a group added: Changed = %q, want [groups]", got)
	}
	for key, want := range map[string]bool{"sql.users": true, "sql.users[2].password": true, "cache.rules": true,
		"cache.default_ttl": true, "sql.listen": false, "cache.enabled": false, "groups[0].password": false,
		"groups[0].replicas": false, "groups[0].read_from": false, "groups[0].max_replica_lag": false} {
		if IsReloadable(key) != want {
			t.Errorf("IsReloadable(%q) = %v", key, !want)
		}
	}
}

// deepCopy copies c's arrays of tables, so that changing an entry of the copy leaves c alone.
func deepCopy(c Config) Config {
	c.Groups = slices.Clone(c.Groups)
	for i := range c.Groups {
		c.Groups[i].Replicas = slices.Clone(c.Groups[i].Replicas)
	}
	c.SQL.Users = slices.Clone(c.SQL.Users)
	c.Containers = slices.Clone(c.Containers)
	c.Cache.Rules = slices.Clone(c.Cache.Rules)
	c.ShardMaps = slices.Clone(c.ShardMaps)
	for i := range c.ShardMaps {
		c.ShardMaps[i].Tables = slices.Clone(c.ShardMaps[i].Tables)
		c.ShardMaps[i].Shards = slices.Clone(c.ShardMaps[i].Shards)
	}
	return c
}

func perturb(t *testing.T, v reflect.Value) {
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		v.SetInt(int64(time.Second))
	case v.Kind() == reflect.String:
		v.SetString("x")
	case v.CanInt():
		v.SetInt(7)
	case v.CanUint():
		v.SetUint(7)
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		v.Set(reflect.ValueOf([]string{"x"}))
	default:
		t.Fatalf("no way to change a %s", v.Type())
	}
}

// TestExampleHasEveryKey: keyway.example.toml at the repository root loads, and names every key of the file
// (as an active line or a commented one, "# key = …", under its [section] or "# [section]"). The key list comes
// from the file's layout, so a key added to the code and not to the example fails here.
func TestExampleHasEveryKey(t *testing.T) {
	const path = "../../keyway.example.toml"
	if _, err := LoadFile(path); err != nil {
		t.Fatalf("the example does not load: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`^#?\s*\[\[?([a-z_.]+)\]\]?\s*(#.*)?$`)
	keyLine := regexp.MustCompile(`^#?\s*([a-z_]+)\s*=`)
	named := map[string]bool{}
	current := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if m := section.FindStringSubmatch(line); m != nil {
			current = m[1] + "."
			continue
		}
		if m := keyLine.FindStringSubmatch(line); m != nil {
			named[current+m[1]] = true
		}
	}
	for _, k := range FileKeys() {
		if !named[k] {
			t.Errorf("keyway.example.toml does not name %s: add it, commented, with what it does and its default", k)
		}
	}
}

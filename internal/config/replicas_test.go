package config

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// groupWith is a file with one valid group and extra lines in it.
func groupWith(lines string) string {
	return "[[groups]]\nname = \"g\"\nprimary = \"10.0.0.5:3306\"\nuser = \"m\"\n" + lines
}

func TestParseReplicas(t *testing.T) {
	c, err := Parse([]byte(`
[cache]
max_staleness = "3s"

[[groups]]
name = "plain"
primary = "10.0.0.5:3306"
user = "m"
replicas = ["10.0.0.6:3306", "/run/mysqld/replica.sock"]

[[groups]]
name = "weighted"
primary = "/run/mysqld/mysqld.sock"
user = "m"
replicas = [{ address = "db2:3306", weight = 3 }, "db3:3306", { address = "db4:3306" }]
read_from = "any"
max_replica_lag = "250ms"

[[groups]]
name = "tables"
primary = "db1:3306"
user = "m"
read_from = "replicas"
[[groups.replicas]]
address = "db2:3306"
weight = 2

[[groups]]
name = "none"
primary = "db1:3306"
user = "m"
`))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Replicas []Replica
		ReadFrom string
		Lag      time.Duration
	}
	want := []got{
		{[]Replica{{"10.0.0.6:3306", 1}, {"/run/mysqld/replica.sock", 1}}, ReadPrimary, 3 * time.Second},
		{[]Replica{{"db2:3306", 3}, {"db3:3306", 1}, {"db4:3306", 1}}, ReadAny, 250 * time.Millisecond},
		{[]Replica{{"db2:3306", 2}}, ReadReplicas, 3 * time.Second},
		{nil, ReadPrimary, 3 * time.Second},
	}
	for i, g := range c.Groups {
		if g := (got{g.Replicas, g.ReadFrom, g.MaxReplicaLag}); !reflect.DeepEqual(g, want[i]) {
			t.Errorf("groups[%d]: %+v, want %+v", i, g, want[i])
		}
	}
	if n := c.Groups[0].Replicas[1].Network(); n != "unix" {
		t.Errorf("a socket path's network = %q", n)
	}
	if n := c.Groups[0].Replicas[0].Network(); n != "tcp" {
		t.Errorf("host:port's network = %q", n)
	}
}

// Without a [cache] section max_replica_lag is the default max_staleness; a Config built in code gets the
// defaults from EnsureDefaults.
func TestReplicaDefaults(t *testing.T) {
	c, err := Parse([]byte(groupWith(`replicas = ["10.0.0.6:3306"]`)))
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Groups[0]; g.MaxReplicaLag != defaultMaxStaleness || g.ReadFrom != ReadPrimary {
		t.Errorf("max_replica_lag = %v, read_from = %q; want %v, %q", g.MaxReplicaLag, g.ReadFrom, defaultMaxStaleness, ReadPrimary)
	}
	code := Config{Groups: []Group{{Name: "g", Primary: "h:1", User: "m", Replicas: []Replica{{Address: "h:2"}}}}}
	code.Cache.MaxStaleness = 4 * time.Second
	code.EnsureDefaults()
	if err := code.Validate(); err != nil {
		t.Fatal(err)
	}
	if g := code.Groups[0]; g.Replicas[0].Weight != 1 || g.ReadFrom != ReadPrimary || g.MaxReplicaLag != 4*time.Second {
		t.Errorf("EnsureDefaults: %+v", g)
	}
}

func TestReplicasEveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]byte(`
[[groups]]
name = "g"
primary = "db1:3306"
user = "m"
replicas = [
  "DB1:03306",                              # the primary, written otherwise
  "db2:3306",
  "db2:3306",                               # twice
  "db3",                                    # no port
  "",
  "relative/sock",
  { address = "db4:3306", weight = 0 },
  { address = "db5:3306", weight = -2 },
  { address = "db6:3306", weight = 1001 },
]
read_from = "everywhere"
max_replica_lag = "-1s"

[[groups]]
name = "h"
primary = "/run/a.sock"
user = "m"
replicas = ["/run/./a.sock"]                # the primary, written otherwise
read_from = "replicas"
max_replica_lag = "0s"

[[groups]]
name = "i"
primary = "db1:3306"
user = "m"
read_from = "any"                           # no replicas
`))
	wantErrors(t, err,
		[]string{`groups[0].max_replica_lag = "-1s"`, "positive duration", "default: cache.max_staleness"},
		[]string{`groups[1].max_replica_lag = "0s"`, "positive duration"},
		[]string{`groups[0].replicas[0] = "DB1:03306"`, "other than the primary", "it is the group's primary"},
		[]string{`groups[0].replicas[2] = "db2:3306"`, "replicas[1] has it already"},
		[]string{`groups[0].replicas[3] = "db3"`, `"host:port"`},
		[]string{`groups[0].replicas[4] = ""`, `"host:port"`},
		[]string{`groups[0].replicas[5] = "relative/sock"`, "absolute unix socket path"},
		[]string{"groups[0].replicas[6].weight = 0", "from 1 to 1000"},
		[]string{"groups[0].replicas[7].weight = -2", "from 1 to 1000"},
		[]string{"groups[0].replicas[8].weight = 1001", "from 1 to 1000"},
		[]string{`groups[0].read_from = "everywhere"`, `"primary"`, `"replicas"`, `"any"`},
		[]string{`groups[1].replicas[0] = "/run/./a.sock"`, "it is the group's primary"},
		[]string{`groups[2].read_from = "any"`, "the group has none", `read_from = "primary"`},
	)
}

func TestReplicasWrongForms(t *testing.T) {
	_, err := Parse([]byte(groupWith(`
replicas = [
  5,
  { address = 7 },
  { weight = 2 },
  { address = "db2:3306", weight = "2", wieght = 3 },
  ["db3:3306"],
]
read_from = 1
max_replica_lag = 5
`)))
	wantErrors(t, err,
		[]string{"groups[0].replicas[0] = 5", "want an array of the group's replicas", `{ address = "host:port", weight = 2 }`},
		[]string{"groups[0].replicas[1] = { address = 7 }", "want an array"},
		[]string{"groups[0].replicas[2] = a table without address", "want an array"},
		[]string{`groups[0].replicas[3].weight = "2"`, "want a whole number from 1 to 1000"},
		[]string{"unknown key groups[0].replicas[3].wieght", "allows address, weight"},
		[]string{"groups[0].replicas[4] = an array", "want an array"},
		[]string{"groups[0].read_from = 1", `want "primary"`},
		[]string{"groups[0].max_replica_lag = 5", "positive duration"},
		// The entries that did not decode are not reported again by Validate as empty addresses.
	)
	_, err = Parse([]byte(groupWith(`replicas = "db2:3306"` + "\n")))
	wantErrors(t, err, []string{`groups[0].replicas = "db2:3306"`, `replicas = ["10.0.0.2:3306", { address = "10.0.0.3:3306", weight = 2 }]`})
}

// read_from = "" is an error, not the default; replicas = [] is no replicas.
func TestReplicasExplicitEmpty(t *testing.T) {
	_, err := Parse([]byte(groupWith("read_from = \"\"\n")))
	wantErrors(t, err, []string{`groups[0].read_from = ""`, `want "primary"`})
	c, err := Parse([]byte(groupWith("replicas = []\n")))
	if err != nil || len(c.Groups[0].Replicas) != 0 {
		t.Fatalf("replicas = []: %+v, %v", c.Groups[0].Replicas, err)
	}
}

// Changing replicas, read_from or max_replica_lag takes a restart; a change inside replicas is named as the key.
func TestReplicasChanged(t *testing.T) {
	old, err := Parse([]byte(groupWith(`replicas = ["db2:3306", "db3:3306"]` + "\n")))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ lines, want string }{
		{`replicas = ["db2:3306", { address = "db3:3306", weight = 2 }]`, "groups[0].replicas"},
		{`replicas = ["db2:3306"]`, "groups[0].replicas"},
		{`replicas = ["db2:3306", "db3:3306"]` + "\nread_from = \"replicas\"", "groups[0].read_from"},
		{`replicas = ["db2:3306", "db3:3306"]` + "\nmax_replica_lag = \"2s\"", "groups[0].max_replica_lag"},
	} {
		c, err := Parse([]byte(groupWith(tc.lines + "\n")))
		if err != nil {
			t.Fatal(err)
		}
		got := Changed(old, c)
		if !slices.Equal(got, []string{tc.want}) || IsReloadable(tc.want) {
			t.Errorf("%s: Changed = %q (reloadable: %v), want [%s], not reloadable", tc.lines, got, IsReloadable(tc.want), tc.want)
		}
	}
	same, _ := Parse([]byte(groupWith(`replicas = [{ address = "db2:3306" }, "db3:3306"]` + "\n")))
	if got := Changed(old, same); len(got) != 0 {
		t.Errorf("the same replicas written otherwise: Changed = %q", got)
	}
}

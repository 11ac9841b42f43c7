package bench

// keyway bench shard: seed 004's experiment. MySQL Fabric's PHP plugin asked Fabric for the shard before each
// statement (an XML-RPC call that ran more than ten queries), and a loop of select_shard + UPDATE ran 83× slower than
// the UPDATE alone. keyway holds the map and routes from the statement itself; this bench measures what that costs.
//
// One PHP process (mysqli, prepared statements bound per id) runs loops of Statements statements by primary key on
// a table of Rows rows, UPDATE then SELECT, after 200 untimed ones (each target is a fresh process: the warm-up
// dials its shards' connections and prepares the statement on them), against these targets, alternating,
// Repetitions rounds:
//   - keyway-sharded: keyway with a local map (xxhash, two shards -80 and 80-), each statement routed by its id;
//   - keyway-unsharded: keyway in front of one group (the global server) holding the whole table: the routing's
//     cost is the difference from keyway-sharded;
//   - keyway-one-shard: keyway with a map of one shard ("-") on a group of its own on the global server: every
//     statement is routed as keyway-sharded's are (the plan's reference read, the hash, the lookup, the shard's
//     pool) but runs on the same server as keyway-unsharded's, so the difference is the router's own cost, apart
//     from what a second server costs this machine (which direct-shard against direct-unsharded shows);
//   - direct-shard: no keyway, the application computing the shard itself (PHP's xxh64, as Vitess's xxhash) and
//     keeping a connection to each shard;
//   - direct-unsharded: no keyway, the global server holding the whole table: with direct-shard, what spreading the
//     rows over two servers costs or gains by itself on this machine, apart from keyway;
//   - strawman (unless --strawman=false): keyway-sharded, with the map looked up before every statement by a query
//     on the global group (keyway_shards.shards), as a lookup service would: Fabric's pattern with one query
//     instead of ten and an RPC. It is the client's doing: keyway never routes that way.
// The figure is statements/s; the ratios are against keyway-unsharded.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/peers"
	"github.com/keywaydb/keyway/internal/shard"
)

// The shard bench's targets.
const (
	shardedTarget   = "keyway-sharded"
	oneShardTarget  = "keyway-one-shard"
	unshardedTarget = "keyway-unsharded"
	directShard     = "direct-shard"
	directUnsharded = "direct-unsharded"
	strawmanTarget  = "strawman"
)

// seedFabricRatio is what seed 004 measured: select_shard + UPDATE against the UPDATE alone.
const seedFabricRatio = 83.0

// ShardOptions configure RunShard.
type ShardOptions struct {
	KeywayBinary string
	Statements   int  // statements per loop (default 2000)
	Rows         int  // rows of the table (default 10000)
	Repetitions  int  // rounds per target (default 5)
	NoStrawman   bool // leave the strawman target out
	Out          io.Writer
	Progress     *Progress
}

// EnsureDefaults replaces zero fields with their defaults.
func (o *ShardOptions) EnsureDefaults() {
	if o.Statements == 0 {
		o.Statements = 2000
	}
	if o.Rows == 0 {
		o.Rows = 10000
	}
	if o.Repetitions == 0 {
		o.Repetitions = 5
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// Validate reports options out of range.
func (o ShardOptions) Validate() error {
	var errs []error
	if o.Statements < 1 || o.Statements > 1000000 {
		errs = append(errs, fmt.Errorf("statements %d: use 1 to 1000000", o.Statements))
	}
	if o.Rows < 2 || o.Rows > 10000000 {
		errs = append(errs, fmt.Errorf("rows %d: use 2 to 10000000", o.Rows))
	}
	if o.Repetitions < 1 || o.Repetitions > 100 {
		errs = append(errs, fmt.Errorf("reps %d: use 1 to 100", o.Repetitions))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: invalid shard options: %w", err)
	}
	return nil
}

func (o ShardOptions) targets() []string {
	t := []string{unshardedTarget, oneShardTarget, shardedTarget, directUnsharded, directShard}
	if !o.NoStrawman {
		t = append(t, strawmanTarget)
	}
	return t
}

// Plan is how many runs RunShard makes; each is one loop, so the time hint is a guess of 2 s a loop.
func (o ShardOptions) Plan() (runs int, hint time.Duration) {
	o.EnsureDefaults()
	runs = 2 * len(o.targets()) * o.Repetitions
	return runs, time.Duration(runs) * 2 * time.Second
}

// ShardReport is the outcome of RunShard.
type ShardReport struct {
	Command    string `json:",omitempty"`
	Server     string
	Statements int
	Rows       int
	ShardCases []ShardCase
}

// ShardCase is one statement's loop on every target.
type ShardCase struct {
	Statement string
	Results   []Result
	// Routing is keyway-sharded's statements/s over keyway-unsharded's (target ≥ 0.95); Router keyway-one-shard's
	// over keyway-unsharded's (the router alone, on the same server); Direct is direct-shard's over
	// keyway-unsharded's; TwoServers direct-shard's over direct-unsharded's (the farm's own effect, without keyway);
	// Strawman keyway-unsharded's over the strawman's (how many times slower a lookup per statement makes the loop:
	// the seed's figure was 83).
	Routing, Router, Direct, TwoServers, Strawman float64
}

// SetCommand records the command line that produced the report.
func (r *ShardReport) SetCommand(c string) { r.Command = c }

// shardPHP is the loop; arguments: mode (keyway, direct or strawman), kind (update or select), statements, rows,
// then host port (keyway) or the two shards' host port pairs (direct). It prints "statements failures seconds
// [first failure]".
const shardPHP = `<?php
mysqli_report(MYSQLI_REPORT_OFF);
[$mode, $kind, $n, $rows] = [$argv[1], $argv[2], (int)$argv[3], (int)$argv[4]];
function conn($host, $port) {
	$db = @mysqli_connect($host, 'app', 'secret', 'test', (int)$port);
	if ($db === false) { fwrite(STDERR, "connect $host:$port: " . mysqli_connect_errno() . " " . mysqli_connect_error() . "\n"); exit(1); }
	return $db;
}
$q = $kind === 'update' ? "UPDATE accounts SET balance = balance + 1 WHERE id = ?" : "SELECT balance FROM accounts WHERE id = ?";
$dbs = $mode === 'direct' ? [conn($argv[5], $argv[6]), conn($argv[7], $argv[8])] : [conn($argv[5], $argv[6])];
$stmts = [];
foreach ($dbs as $db) {
	$st = mysqli_prepare($db, $q);
	if ($st === false) { fwrite(STDERR, "prepare: " . mysqli_error($db) . "\n"); exit(1); }
	$stmts[] = $st;
}
mt_srand(4);
$fail = 0; $first = ''; $id = 0;
// Pass 0 warms up, untimed: keyway's pools dial each shard's connection and prepare the statement on it at its first
// execute, and a fresh process grows its heap; pass 1 is the measured loop.
for ($pass = 0; $pass < 2; $pass++) {
$count = $pass === 0 ? min(200, $n) : $n;
if ($pass === 1) { $fail = 0; $first = ''; $t = microtime(true); }
for ($i = 0; $i < $count; $i++) {
	$id = mt_rand(1, $rows);
	$c = 0;
	if ($mode === 'direct') { $c = hexdec(substr(hash('xxh64', (string)$id), 14, 2)) >= 0x80 ? 1 : 0; }
	if ($mode === 'strawman') {
		$r = mysqli_query($dbs[0], "SELECT name, group_name FROM keyway_shards.shards WHERE mapping = 'accounts'");
		if ($r === false) { $fail++; if ($first === '') { $first = mysqli_errno($dbs[0]) . " " . mysqli_error($dbs[0]); } continue; }
		while (mysqli_fetch_row($r)) {}
		mysqli_free_result($r);
	}
	$st = $stmts[$c];
	mysqli_stmt_bind_param($st, 'i', $id);
	if (!mysqli_stmt_execute($st)) { $fail++; if ($first === '') { $first = mysqli_stmt_errno($st) . " " . mysqli_stmt_error($st); } continue; }
	if ($kind === 'select') { mysqli_stmt_store_result($st); mysqli_stmt_free_result($st); }
}
}
$el = microtime(true) - $t;
printf("%d %d %.6f %s\n", $n, $fail, $el, $first);
`

// shardEnv is the farm: a global server and two shards.
type shardEnv struct {
	o      ShardOptions
	farm   *peers.Shards
	byAddr map[string]string
	script string
}

// RunShard runs the shard bench.
func RunShard(ctx context.Context, o ShardOptions) (*ShardReport, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	bin, err := prepare(o.KeywayBinary, "php", "mariadbd", "mariadb-install-db")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "shard bench: starting MariaDB, a global server and 2 shards\n")
	farm, err := peers.StartShards(ctx, 2)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer farm.Stop()
	e := &shardEnv{o: o, farm: farm, byAddr: map[string]string{}}
	version, err := serverVersion(ctx, farm.Global.AppDSN)
	if err != nil {
		return nil, err
	}
	rep := &ShardReport{Server: "MariaDB " + version, Statements: o.Statements, Rows: o.Rows}
	m, err := shard.FromConfig(e.mapConfig())
	if err != nil {
		return nil, err
	}
	if err := e.load(ctx, m); err != nil {
		return nil, err
	}
	if e.script, err = writePHP("keyway-bench-shard-*.php", shardPHP); err != nil {
		return nil, err
	}
	defer os.Remove(e.script)
	shardedCfg, err := writeTemp("keyway-bench-shard-*.toml", e.shardedConfig(false), "keyway config")
	if err != nil {
		return nil, err
	}
	defer os.Remove(shardedCfg)
	oneShardCfg, err := writeTemp("keyway-bench-shard-one-*.toml", e.shardedConfig(true), "keyway config")
	if err != nil {
		return nil, err
	}
	defer os.Remove(oneShardCfg)
	unshardedCfg, err := writeKeywaySQLConfig(farm.Global.Socket, false, keywayLimits{})
	if err != nil {
		return nil, err
	}
	defer os.Remove(unshardedCfg)

	byName := map[string]target{
		unshardedTarget: keywaySQLStarter(unshardedTarget, bin, unshardedCfg),
		shardedTarget:   keywaySQLStarter(shardedTarget, bin, shardedCfg),
		oneShardTarget:  keywaySQLStarter(oneShardTarget, bin, oneShardCfg),
		strawmanTarget:  keywaySQLStarter(strawmanTarget, bin, shardedCfg),
		directShard: {name: directShard, start: func(context.Context) (running, error) {
			return running{addr: directShard, stop: func() error { return nil }}, nil
		}},
		directUnsharded: {name: directUnsharded, start: func(context.Context) (running, error) {
			return running{addr: farm.Global.Addr, stop: func() error { return nil }}, nil
		}},
	}
	var targets []target
	for _, n := range o.targets() {
		targets = append(targets, byName[n])
	}
	targets = namedByAddr(e.byAddr, targets...)
	var shared []cpuProc
	for i, s := range farm.All() {
		name := "mariadb-global"
		if i > 0 {
			name = "mariadb-s" + strconv.Itoa(i)
		}
		shared = append(shared, procOf(name, s.Process()))
	}
	meter := meter{client: loadGenerator("php"), shared: shared}
	for _, kind := range []string{"update", "select"} {
		stmt := "UPDATE accounts SET balance = balance + 1 WHERE id = ?"
		if kind == "select" {
			stmt = "SELECT balance FROM accounts WHERE id = ?"
		}
		fmt.Fprintf(o.Out, "%s, %d statements a loop:\n", stmt, o.Statements)
		results, err := runTargets(ctx, targets, o.Repetitions, e.loop(kind), meter, o.Out, o.Progress, "shard "+kind)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		c := ShardCase{Statement: stmt, Results: results}
		rs := ratios(results, unshardedTarget)
		c.Routing = rs[ratioKey(shardedTarget, unshardedTarget)]
		c.Router = rs[ratioKey(oneShardTarget, unshardedTarget)]
		c.Direct = rs[ratioKey(directShard, unshardedTarget)]
		if d := rs[ratioKey(directUnsharded, unshardedTarget)]; d > 0 {
			c.TwoServers = c.Direct / d
		}
		if v := rs[ratioKey(strawmanTarget, unshardedTarget)]; v > 0 {
			c.Strawman = 1 / v
		}
		rep.ShardCases = append(rep.ShardCases, c)
	}
	return rep, nil
}

// mapConfig is the bench's map: accounts by id, xxhash, -80 on s1 and 80- on s2.
func (e *shardEnv) mapConfig() shard.Config {
	return shard.Config{Global: "global", Mappings: []shard.MappingConfig{{
		Name: "accounts", Kind: "xxhash", Tables: []shard.TableConfig{{Table: "test.accounts", Column: "id"}},
		Shards: []shard.ShardConfig{{Name: "-80", Group: "s1"}, {Name: "80-", Group: "s2"}},
	}}}
}

// shardedConfig is keyway-sharded's (and the strawman's) configuration: the three servers over their sockets,
// the map, the cache off (routing is what is measured). With oneShard, keyway-one-shard's: the map has one shard,
// "-", on group s0, a second group on the global server.
func (e *shardEnv) shardedConfig(oneShard bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[memcache]\nlisten = \"\"\n[cache]\nenabled = false\n[sql]\n[[sql.users]]\nname = %q\npassword = %q\nauth_plugin = \"mysql_native_password\"\n", sqlUser, sqlPassword)
	group := func(name, socket string) {
		fmt.Fprintf(&b, "[[groups]]\nname = %q\nprimary = %q\nuser = %q\npassword = %q\n", name, socket, sqlUser, sqlPassword)
	}
	shards := "[[shard_maps.shards]]\nname = \"-80\"\ngroup = \"s1\"\n[[shard_maps.shards]]\nname = \"80-\"\ngroup = \"s2\"\n"
	if oneShard {
		group("global", e.farm.Global.Socket)
		group("s0", e.farm.Global.Socket)
		shards = "[[shard_maps.shards]]\nname = \"-\"\ngroup = \"s0\"\n"
	} else {
		for i, s := range e.farm.All() {
			name := "global"
			if i > 0 {
				name = "s" + strconv.Itoa(i)
			}
			group(name, s.Socket)
		}
	}
	b.WriteString("[sharding]\nglobal = \"global\"\n[[shard_maps]]\nname = \"accounts\"\nkind = \"xxhash\"\n" +
		"tables = [{ table = \"test.accounts\", column = \"id\" }]\n" + shards)
	return b.String()
}

// load creates accounts with Rows rows on the global server (keyway-unsharded's whole table) and each row on its
// shard, and the map's keyway_shards tables on the global server for the strawman to read.
func (e *shardEnv) load(ctx context.Context, m *shard.Map) error {
	t := m.Table("test", "accounts")
	var dbs []*sql.DB
	for _, s := range e.farm.All() {
		db, err := sql.Open("mysql", s.AppDSN)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, "CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL)"); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		dbs = append(dbs, db)
	}
	rows := make([][]string, len(dbs))
	for id := 1; id <= e.o.Rows; id++ {
		v := "(" + strconv.Itoa(id) + ",0)"
		rows[0] = append(rows[0], v)
		sh, err := t.ShardOf([]byte(strconv.Itoa(id)), false)
		if err != nil {
			return err
		}
		i, _ := strconv.Atoi(strings.TrimPrefix(sh.Group, "s"))
		rows[i] = append(rows[i], v)
	}
	for i, db := range dbs {
		for start := 0; start < len(rows[i]); start += 1000 {
			end := min(start+1000, len(rows[i]))
			if _, err := db.ExecContext(ctx, "INSERT INTO accounts VALUES "+strings.Join(rows[i][start:end], ",")); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
		}
	}
	root, err := sql.Open("mysql", e.farm.Global.RootDSN)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer root.Close()
	stmts := append(shard.CreateSchemaSQL(""),
		"INSERT INTO keyway_shards.map_version VALUES (1, 1)",
		"INSERT INTO keyway_shards.mappings VALUES ('accounts', 'xxhash')",
		"INSERT INTO keyway_shards.shards VALUES ('accounts', '-80', 's1', NULL, NULL), ('accounts', '80-', 's2', NULL, NULL)",
		"INSERT INTO keyway_shards.tables VALUES ('test', 'accounts', 'accounts', 'id', FALSE)",
		"GRANT SELECT ON keyway_shards.* TO 'app'@'%'")
	for _, q := range stmts {
		if _, err := root.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("bench: %s: %w", q, err)
		}
	}
	return nil
}

// loop is the load: one PHP loop of kind's statements on the target at addr.
func (e *shardEnv) loop(kind string) loadFunc {
	return func(ctx context.Context, addr string) (sample, error) {
		mode := "keyway"
		args := []string{}
		switch e.byAddr[addr] {
		case directShard:
			mode = "direct"
			for _, s := range e.farm.Shards {
				h, p, err := splitAddr(s.Addr)
				if err != nil {
					return sample{}, err
				}
				args = append(args, h, p)
			}
		case strawmanTarget:
			mode = "strawman"
		}
		if mode != "direct" {
			h, p, err := splitAddr(addr)
			if err != nil {
				return sample{}, err
			}
			args = append(args, h, p)
		}
		out, err := runPHP(ctx, 10*time.Minute, e.script, append([]string{mode, kind, strconv.Itoa(e.o.Statements), strconv.Itoa(e.o.Rows)}, args...)...)
		if err != nil {
			return sample{}, err
		}
		f := strings.SplitN(strings.TrimSpace(out), " ", 4)
		if len(f) < 3 {
			return sample{}, fmt.Errorf("bench: the shard loop printed %q", out)
		}
		n, err1 := strconv.ParseInt(f[0], 10, 64)
		failures, err2 := strconv.ParseInt(f[1], 10, 64)
		secs, err3 := strconv.ParseFloat(f[2], 64)
		if errors.Join(err1, err2, err3) != nil || secs <= 0 {
			return sample{}, fmt.Errorf("bench: the shard loop printed %q", out)
		}
		first := ""
		if len(f) == 4 {
			first = f[3]
		}
		s := sample{ops: float64(n-failures) / secs, n: n - failures, errs: phpErrors(failures, first)}
		s.note = fmt.Sprintf("(%d statements, %d failed, in %.3fs: %.0f µs a statement", n, failures, secs, 1e6*secs/float64(n))
		if first != "" {
			s.note += "; first failure: " + first
		}
		s.note += ")"
		return s, nil
	}
}

// WriteText prints the report.
func (r *ShardReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "keyway bench shard: %s, a global server and 2 shards (xxhash -80/80-); one PHP process, %d prepared statements a loop over %d rows\n",
		r.Server, r.Statements, r.Rows)
	for _, c := range r.ShardCases {
		fmt.Fprintf(w, "\n%s (statements/s):\n", c.Statement)
		rs := ratios(c.Results, unshardedTarget)
		writeTable(w, c.Results, unshardedTarget, rs)
		writeCPU(w, c.Results)
		verdict := func(r float64) string {
			if r < 0.95 {
				return "MISSED"
			}
			return "met"
		}
		fmt.Fprintf(w, "routing: keyway-sharded %.2f× keyway-unsharded (target ≥ 0.95: %s); direct-shard %.2f×; without keyway, two shards run at %.2f× one server\n",
			c.Routing, verdict(c.Routing), c.Direct, c.TwoServers)
		fmt.Fprintf(w, "router alone: keyway-one-shard (every statement routed, to the same server) %.2f× keyway-unsharded (target ≥ 0.95: %s)\n",
			c.Router, verdict(c.Router))
		if c.Strawman > 0 {
			fmt.Fprintf(w, "strawman (a map lookup query on the global group before each statement): %.2f× slower than keyway-unsharded (seed 004's Fabric: %.0f×)\n",
				c.Strawman, seedFabricRatio)
		}
	}
}

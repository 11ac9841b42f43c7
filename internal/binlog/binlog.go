// Package binlog follows a primary's binary log as a replica (go-mysql's replication package) and turns what the
// primary commits into invalidations in package validity, so that copies cached by keyway (caching containers' rows
// and the SQL door's results) never outlive a write made directly in MySQL by more than max_staleness.
//
// How it works:
//   - Row events (ROW format) of tables someone registered in the registry become (table, key) invalidations: for
//     each watched key column (validity.KeyWatch) the before and after images' values are normalized and marked
//     changed (a numeric watch renders the value with validity.ColumnKey; a value it cannot render invalidates the
//     table). A row whose key value is missing (MINIMAL row image, NULL) invalidates its whole table.
//   - Invalidations are applied when the transaction commits (XID, or COMMIT for non-transactional tables), never
//     on a row event of an open transaction: a reader can only miss a copy for a change it can already see.
//   - Every commit's invalidations are applied a second time a moment later (recheckDelay). The primary sends a
//     transaction to replicas once it is in the binlog, a moment before the storage engine makes it visible to
//     other sessions (MariaDB's and MySQL's group commit write the binlog, then commit in InnoDB); a fill that
//     starts between the two takes its stamp after the first invalidation yet reads the row as it was, and only
//     the second one drops that copy. So such a copy lives for recheckDelay at most, well inside max_staleness.
//   - A watch may let a row's change pass (validity.KeyWatch.Holds): for an after image (a write, or an update whose
//     key stays), the follower asks the watch whether its cache's copy already is that row (the echo of a write
//     keyway made and cached itself); then only the table's rows mark ticks. It asks again on the second
//     application, unless the watch said the first answer was settled and its Settling count has not moved since
//     (read before the first application): then nothing has started that could store an older copy, and the
//     answer stands. Deletes, and updates that move the key, always invalidate the old key.
//   - DDL (any query event other than BEGIN, COMMIT and ROLLBACK) invalidates every table it names (package
//     sqlnames); a statement that does not parse invalidates everything.
//   - Table positions (MariaDB; validity.Gate.NoteCommit): at each commit, before its invalidations are applied, the
//     follower notes the commit's GTID on the group's gate as the position of every table the transaction changed
//     (its rows events' tables, registered in the registry or not) or its DDL named, so a read of those tables goes
//     only to a replica that has applied it. A commit that names no table raises only the group's newest position
//     (Gate.Newest). A DDL that does not parse raises every table's position, those never seen included
//     (Gate.NoteAll), as it drops every copy: Needs of any table covers it, so the SQL door need not fall back on
//     Newest for a table such a statement may have changed. Newest is for statements whose tables the door cannot
//     name itself. The position the follower starts from (the primary's, or a resumed checkpoint) and the one it
//     restarts from after a gap are noted the same way (NoteAll): commits before them are never seen, so every
//     table may have changed up to there. A MySQL follower notes nothing: the group's positions stay zero (its
//     GTID sets are not modelled yet).
//   - Freshness is proved, not guessed: every probe interval the follower asks the primary for the end of its
//     binlog (SHOW MASTER STATUS) at instant q; once the follower has applied everything up to that position,
//     every commit made before q is applied, and it vouches (validity.Voucher) for copies until q + max_staleness.
//     A follower that is disconnected never vouches, so a stopped or lagging follower closes the gate within
//     max_staleness whatever the cause.
//   - Checkpoint: MariaDB GTIDs (gtid_binlog_pos), or file and position for MySQL. The checkpoint is the position
//     after the last applied commit; a reconnect (with backoff) resumes there. When the primary no longer has it
//     (purged, RESET MASTER, GTID domain change: error 1236) the follower reads the primary's current position
//     (noting it on the gate), invalidates everything, and starts from there.
//   - A new primary (PrimaryChanged: the group followed a switchover or a failover, and Options.Dial reaches the new
//     server): the follower leaves the former primary at once (after a switchover it would go on relaying the new
//     one's commits; after a failover it is gone) and resumes on the new one by GTID from its checkpoint, so no
//     commit goes unseen and the copies stay valid. The probes taken of the former primary are dropped, and the
//     applied file and position are unknown until the new primary's stream names them: binlog coordinates are
//     per server, so only the new primary's own vouch. When the new primary lacks a commit the follower applied
//     (a failover that lost commits), or the server is MySQL (no GTIDs here), that is a gap, handled as above.
//
// Invariant: the checkpoint and the vouched position only move forward over applied commits; invalidations of a
// transaction are applied before its commit's position counts as reached, and after its GTID is noted as its
// tables' position.
package binlog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/pingcap/tidb/pkg/parser"
	_ "github.com/pingcap/tidb/pkg/parser/test_driver"

	"github.com/keywaydb/keyway/internal/sqlnames"
	"github.com/keywaydb/keyway/internal/validity"
)

// DefaultMaxStaleness is Options.MaxStaleness's default.
const DefaultMaxStaleness = time.Second

// Options configure a Follower.
type Options struct {
	Group          string // the backend group's name, for logs and status
	User, Password string // an account with REPLICATION SLAVE and REPLICATION CLIENT
	// Dial reaches the primary (backend.Group.DialWritable); the address it is given is ignored.
	Dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	TLS      *tls.Config // nil = plaintext
	ServerID uint32      // the follower's replica server_id; must differ from every server's and keyway's
	// MaxStaleness is how stale a copy may be when it is served (default 1s).
	MaxStaleness time.Duration
	Registry     *validity.Registry
	Logger       *slog.Logger
	// Resume, when set, is where to start instead of the primary's current position: the checkpoint an earlier
	// run saved with the copies it vouched for (package warm). Every commit after it is replayed, so those
	// copies are invalidated as if keyway had kept following. A checkpoint of another flavor is ignored.
	Resume *Checkpoint
	// RetryMax is the longest pause between two attempts to reconnect (default DefaultRetryMax); the pause starts
	// at a tenth of a second, at most RetryMax, and doubles after each failed attempt.
	RetryMax time.Duration
}

// DefaultRetryMax is Options.RetryMax's default.
const DefaultRetryMax = 5 * time.Second

// Checkpoint is a follower's applied position: every commit up to it has been applied (its invalidations made).
type Checkpoint struct {
	Flavor string `json:"flavor"`
	File   string `json:"file"`
	Pos    uint32 `json:"position"`
	GTID   string `json:"gtid,omitempty"` // MariaDB: the last applied GTID of each domain
}

// Server is what Check read of the primary.
type Server struct {
	Version, Flavor string // Flavor is mysql.MariaDBFlavor or mysql.MySQLFlavor
	RowImage        string
}

// Check connects as o's account and verifies that the primary can be followed: binary log on, ROW format, a row
// image that logs keys, and the replication grants. Each error says how to fix the server.
func Check(ctx context.Context, o Options) (Server, error) {
	c, err := connect(ctx, o)
	if err != nil {
		return Server{}, err
	}
	defer c.Close()
	r, err := c.Execute("SELECT @@version, @@log_bin, @@binlog_format, @@binlog_row_image")
	if err != nil {
		return Server{}, fmt.Errorf("reading the binlog settings: %w", err)
	}
	var s Server
	s.Version, _ = r.GetString(0, 0)
	logBin, _ := r.GetInt(0, 1)
	format, _ := r.GetString(0, 2)
	s.RowImage, _ = r.GetString(0, 3)
	s.Flavor = mysql.MySQLFlavor
	if strings.Contains(strings.ToLower(s.Version), "mariadb") {
		s.Flavor = mysql.MariaDBFlavor
	}
	switch {
	case logBin != 1:
		return s, &UnusableError{"the binary log is off: start the server with log_bin (--log-bin), binlog_format=ROW"}
	case !strings.EqualFold(format, "ROW"):
		return s, &UnusableError{fmt.Sprintf("binlog_format is %s: keyway needs ROW (SET GLOBAL binlog_format=ROW, and binlog_format=ROW in the server's config)", format)}
	case !strings.EqualFold(s.RowImage, "FULL") && !strings.EqualFold(s.RowImage, "NOBLOB") && !strings.EqualFold(s.RowImage, "MINIMAL"):
		return s, &UnusableError{fmt.Sprintf("binlog_row_image is %s: keyway needs FULL (or NOBLOB, or MINIMAL with keys logged)", s.RowImage)}
	}
	if missing, err := missingGrants(c); err != nil {
		return s, fmt.Errorf("reading the account's grants: %w", err)
	} else if missing != "" {
		return s, &UnusableError{fmt.Sprintf("the account %q lacks %s: GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO it (or set binlog_user and binlog_password on the group)", o.User, missing)}
	}
	return s, nil
}

// UnusableError is Check's finding that the primary's binlog settings, or the account's grants, do not let a
// follower work (not that the primary could not be reached): the message says what to change on the server.
type UnusableError struct{ Msg string }

func (e *UnusableError) Error() string { return e.Msg }

// missingGrants names the replication privileges the connected account lacks ("" when it has them). MariaDB
// 10.5+ calls them REPLICATION REPLICA (or SLAVE) and BINLOG MONITOR (or REPLICATION CLIENT).
func missingGrants(c *client.Conn) (string, error) {
	r, err := c.Execute("SHOW GRANTS")
	if err != nil {
		return "", err
	}
	var all strings.Builder
	for i := range r.RowNumber() {
		g, _ := r.GetString(i, 0)
		if strings.Contains(g, " ON *.* ") {
			all.WriteString(strings.ToUpper(g))
			all.WriteByte('\n')
		}
	}
	grants := all.String()
	has := func(names ...string) bool {
		for _, n := range append(names, "ALL PRIVILEGES") {
			if strings.Contains(grants, n) {
				return true
			}
		}
		return false
	}
	var missing []string
	if !has("REPLICATION SLAVE", "REPLICATION REPLICA") {
		missing = append(missing, "REPLICATION SLAVE")
	}
	if !has("REPLICATION CLIENT", "BINLOG MONITOR", "SUPER") {
		missing = append(missing, "REPLICATION CLIENT")
	}
	return strings.Join(missing, " and "), nil
}

func connect(ctx context.Context, o Options) (*client.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.ConnectWithDialer(ctx, "", "primary:0", o.User, o.Password, "", client.Dialer(o.Dial), func(c *client.Conn) error {
		c.SetTLSConfig(o.TLS)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("group %q: connecting as %q: %w", o.Group, o.User, err)
	}
	return c, nil
}

// State is where a follower is.
type State string

const (
	Starting     State = "starting"
	Following    State = "following"
	Reconnecting State = "reconnecting"
	Stopped      State = "stopped"
)

// Status is a snapshot of a follower.
type Status struct {
	Group    string    `json:"group"`
	State    State     `json:"state"`
	Flavor   string    `json:"flavor"`
	File     string    `json:"file"`
	Position uint32    `json:"position"`
	GTID     string    `json:"gtid,omitempty"`
	Fresh    bool      `json:"fresh"`               // copies may be served now
	FreshAt  time.Time `json:"fresh_at,omitzero"`   // every commit before this instant is applied
	LagMS    int64     `json:"lag_ms"`              // now - FreshAt
	Events   uint64    `json:"events"`              // binlog events read
	Commits  uint64    `json:"commits"`             // transactions applied
	Keys     uint64    `json:"key_invalidations"`   // (table, key) invalidations
	Tables   uint64    `json:"table_invalidations"` // whole-table invalidations (DDL, missing keys)
	DDL      uint64    `json:"ddl"`                 // DDL statements applied (each drops the copies of the tables it names)
	Gaps     uint64    `json:"gaps"`                // positions lost: everything invalidated
	Reconn   uint64    `json:"reconnects"`
	LastErr  string    `json:"last_error,omitempty"`
}

// Follower follows one primary's binlog. Build it with Start.
type Follower struct {
	o       Options
	server  Server
	log     *slog.Logger
	voucher *validity.Voucher
	gate    *validity.Gate // the group's: the follower notes each commit's position on it
	stop    chan struct{}
	done    sync.WaitGroup
	parser  *parser.Parser // used by the event loop only

	events, commits, keys, tables, ddls, gaps, reconnects atomic.Uint64

	mu struct {
		sync.Mutex
		state     State
		connected bool
		file      string // the applied position: the end of the last applied commit
		pos       uint32
		gtids     map[uint32]mysql.MariadbGTID // MariaDB: the last applied GTID of each domain
		probes    []probe
		freshAt   time.Time
		lastErr   error
		syncer    *replication.BinlogSyncer
		// repoint: the group follows a new primary (PrimaryChanged) and the run loop has not yet left the
		// former one; primaryGen counts those changes (a probe read across one is dropped).
		repoint    bool
		primaryGen uint64
		stream     net.Conn // the replication connection of the running follow, once dialed
	}

	// The event loop's own state.
	curGTID   mysql.MariadbGTID
	inTx      bool
	pendKeys  []pendingKey
	pendWhole []*validity.Table
	// pendTables are every table the open transaction changed (rows) or its DDL named, registered or not: their
	// positions rise to the commit's GTID. pendAll: a statement whose tables could not be named, so every table's
	// does (validity.Gate.NoteAll).
	pendTables []validity.TableID
	pendAll    bool
	columns    map[validity.TableID]map[string]int // column ordinals by lower-case name

	metaMu  sync.Mutex
	meta    *client.Conn // probes and information_schema lookups
	metaGen uint64       // the primaryGen meta was dialed in

	recheckMu sync.Mutex
	rechecks  []recheck // applied commits' invalidations, in commit order, to apply again when due
	// spareKeys are rechecks' key arrays, applied and cleared, for the next commits' keys: a commit hands its
	// pendKeys to its recheck rather than a copy (a copy per commit was a tenth of what an async set allocated).
	spareKeys [][]pendingKey

	resumed *Checkpoint // Options.Resume when the follower started from it; set before Start returns

	// outage is the run goroutine's account of the connection being lost (see run): since when, and how many
	// attempts to reconnect have failed. Zero since: connected (or starting).
	outage struct {
		since    time.Time
		attempts int
	}
}

// pendingKey is a change of a row under one watched key, applied at commit (see apply).
type pendingKey struct {
	t   *validity.Table
	key []byte
	// watch and img, for an after image of a watch that compares copies (KeyWatch.Holds): the copy is kept while
	// the watch says it equals img.
	watch *validity.KeyWatch
	img   validity.RowImage
	// settled and epoch: the first application's answer kept the copy and stands for the second while the watch's
	// Settling is still epoch (see the package comment).
	settled bool
	epoch   uint64
}

// apply invalidates the copies of p's key, unless the watch's copy holds the row as the change left it. first says
// whether this is the commit's first application (see the package comment); it records there what the second needs.
func (p *pendingKey) apply(first bool) {
	if p.watch != nil {
		if first {
			p.epoch = p.watch.Settling() // before the look: whatever starts after it moves the count
		} else if p.settled && p.watch.Settling() == p.epoch {
			p.t.Touched()
			return
		}
		holds, settled := p.watch.Holds(p.key, p.img, first)
		p.settled = first && holds && settled
		if holds {
			p.t.Touched()
			return
		}
	}
	p.t.Changed(p.key)
}

// recheck is one commit's invalidations, to apply again at due (see the package comment).
type recheck struct {
	due   time.Time
	keys  []pendingKey
	whole []*validity.Table
}

// probe is an instant at which the primary's binlog ended at (file, pos).
type probe struct {
	at   time.Time
	file string
	pos  uint32
}

// Start checks the primary (see Check), registers the follower as a voucher of o.Registry (so copies are not
// served until it has caught up), and follows from the primary's current position in the background.
func Start(ctx context.Context, o Options) (*Follower, error) {
	if o.MaxStaleness <= 0 {
		o.MaxStaleness = DefaultMaxStaleness
	}
	if o.RetryMax <= 0 {
		o.RetryMax = DefaultRetryMax
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s, err := Check(ctx, o)
	if err != nil {
		return nil, err
	}
	f := &Follower{o: o, server: s, log: o.Logger.With("group", o.Group, "component", "binlog"), stop: make(chan struct{}),
		parser: parser.New(), columns: map[validity.TableID]map[string]int{}, gate: o.Registry.Gate(o.Group)}
	f.mu.state = Starting
	if err := f.startAt(o.Resume); err != nil {
		return nil, err
	}
	f.voucher = o.Registry.RequireVouch(o.Group)
	f.log.Info("binlog follower started: copies are invalidated by the primary's commits, and served only while the follower is within max_staleness",
		"server", s.Version, "row_image", s.RowImage, "server_id", o.ServerID, "max_staleness", o.MaxStaleness.String(), "file", f.mu.file, "position", f.mu.pos)
	f.done.Add(2) // from here on f.mu is shared with the follower's goroutines
	go f.run()
	go f.probeLoop()
	return f, nil
}

// startAt sets the checkpoint to c, or to the primary's current end of binlog when c is nil or of another flavor.
func (f *Follower) startAt(c *Checkpoint) error {
	if c == nil || c.Flavor != f.server.Flavor {
		return f.startAtCurrent()
	}
	gtids, err := parseGTIDs(c.GTID)
	if err != nil {
		return err
	}
	if f.server.Flavor != mysql.MariaDBFlavor {
		gtids = nil
	}
	f.mu.file, f.mu.pos, f.mu.gtids = c.File, c.Pos, gtids
	f.gate.NoteAll(positionOf(gtids)) // the commits before the checkpoint are not replayed
	f.resumed = c
	f.log.Info("binlog follower resumes from the saved checkpoint: commits made since are replayed before cached copies are served",
		"file", c.File, "position", c.Pos, "gtid", c.GTID)
	return nil
}

// ResumedFrom is the checkpoint the follower started from (Options.Resume), or nil when it started at the
// primary's position then: only copies vouched for by that checkpoint may be restored.
func (f *Follower) ResumedFrom() *Checkpoint { return f.resumed }

// Checkpoint is the applied position now: every commit up to it has been applied.
func (f *Follower) Checkpoint() *Checkpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &Checkpoint{Flavor: f.server.Flavor, File: f.mu.file, Pos: f.mu.pos, GTID: gtidString(f.mu.gtids)}
}

// startAtCurrent sets the checkpoint to the primary's current end of binlog.
func (f *Follower) startAtCurrent() error {
	file, pos, err := f.masterPos()
	if err != nil {
		return err
	}
	var gtids map[uint32]mysql.MariadbGTID
	if f.server.Flavor == mysql.MariaDBFlavor {
		var s string
		err = f.metaQuery(func(c *client.Conn) error {
			r, err := c.Execute("SELECT @@gtid_binlog_pos")
			if err == nil {
				s, _ = r.GetString(0, 0)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("reading gtid_binlog_pos: %w", err)
		}
		if gtids, err = parseGTIDs(s); err != nil {
			return err
		}
	}
	// Every commit before this position goes unseen: any table may have changed up to it.
	f.gate.NoteAll(positionOf(gtids))
	f.mu.Lock()
	f.mu.file, f.mu.pos, f.mu.gtids = file, pos, gtids
	f.mu.Unlock()
	return nil
}

// Close stops the follower. Copies are no longer vouched for once its last vouch runs out.
func (f *Follower) Close() {
	select {
	case <-f.stop:
		return
	default:
	}
	close(f.stop)
	f.mu.Lock()
	if f.mu.syncer != nil {
		f.mu.syncer.Close()
	}
	f.mu.Unlock()
	f.done.Wait()
	f.metaMu.Lock()
	if f.meta != nil {
		f.meta.Close()
	}
	f.metaMu.Unlock()
	f.setState(Stopped, false, nil)
}

// Status returns a snapshot.
func (f *Follower) Status() Status {
	f.mu.Lock()
	s := Status{Group: f.o.Group, State: f.mu.state, Flavor: f.server.Flavor, File: f.mu.file, Position: f.mu.pos,
		GTID: gtidString(f.mu.gtids), FreshAt: f.mu.freshAt}
	if f.mu.lastErr != nil {
		s.LastErr = f.mu.lastErr.Error()
	}
	f.mu.Unlock()
	s.Fresh = f.voucher.Fresh()
	if !s.FreshAt.IsZero() {
		s.LagMS = time.Since(s.FreshAt).Milliseconds()
	}
	s.Events, s.Commits, s.Keys, s.Tables, s.DDL = f.events.Load(), f.commits.Load(), f.keys.Load(), f.tables.Load(), f.ddls.Load()
	s.Gaps, s.Reconn = f.gaps.Load(), f.reconnects.Load()
	return s
}

func (f *Follower) setState(s State, connected bool, err error) {
	f.mu.Lock()
	f.mu.state, f.mu.connected = s, connected
	if err != nil {
		f.mu.lastErr = err
	}
	f.mu.Unlock()
}

// run follows until Close, reconnecting with backoff. An outage is logged as its changes of state, not as each
// attempt: the connection lost (its error), the first attempt to reconnect that fails (its error; later ones are
// counted, and logged at debug level only) and the reconnection (how many attempts failed, and for how long).
func (f *Follower) run() {
	defer f.done.Done()
	backoff := min(100*time.Millisecond, f.o.RetryMax)
	for {
		began := time.Now()
		err := f.follow()
		select {
		case <-f.stop:
			return
		default:
		}
		f.setState(Reconnecting, false, err)
		f.reconnects.Add(1)
		f.discardOpenTx()
		var me *mysql.MyError
		if f.takeRepoint() {
			if !f.resumeOnNewPrimary() {
				f.mu.Lock()
				f.mu.repoint = true // undecided: again after the pause
				f.mu.Unlock()
			} else {
				continue // at once: a switchover's copies stay valid only while the follower keeps up
			}
		} else if errors.As(err, &me) && me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
			// The primary no longer has our position: what changed since cannot be known. The new position is
			// read (and noted on the gate) before the copies are dropped: a stamp taken after the drop must find
			// every table's position at or after it (see package validity), and whatever commits after the
			// position is read is replayed.
			f.log.Warn("binlog position lost on the primary (purged, reset, or a GTID domain change): every cached copy (restored ones too) is dropped and following restarts at the primary's current position", "err", err)
			if err := f.startAtCurrent(); err != nil {
				f.log.Warn("binlog follower: reading the primary's position", "err", err)
			}
			f.o.Registry.InvalidateAll()
			f.gaps.Add(1) // counted once everything is invalidated, as Status says
		} else {
			f.disconnected(err)
		}
		if time.Since(began) > 10*time.Second {
			backoff = min(100*time.Millisecond, f.o.RetryMax)
		}
		select {
		case <-f.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, f.o.RetryMax)
	}
}

// errRepoint ends a follow on the former primary (PrimaryChanged).
var errRepoint = errors.New("binlog: the group follows a new primary")

// PrimaryChanged tells the follower that its group now follows a new primary (backend.GroupOptions.OnNewPrimary;
// Options.Dial reaches the new server): it leaves the former primary and resumes on the new one (see the package
// comment). It returns at once, waiting on no server (the group's watcher calls it); safe from any goroutine.
func (f *Follower) PrimaryChanged() {
	f.mu.Lock()
	f.mu.repoint = true
	f.mu.primaryGen++ // a probe read before is dropped, and the query connection is dialed again (metaQuery)
	f.mu.probes = nil
	f.mu.file, f.mu.pos = "", 0 // before every probe (see before), until the new primary's stream names a position
	stream := f.mu.stream
	f.mu.stream = nil
	f.mu.Unlock()
	if stream != nil {
		stream.Close() // the follow's read fails at once (closing the syncer would wait for its read)
	}
}

// takeRepoint reports whether PrimaryChanged asked to leave the former primary, and clears the request.
func (f *Follower) takeRepoint() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.mu.repoint
	f.mu.repoint = false
	return r
}

// resumeOnNewPrimary decides where the follower resumes on a new primary: from its checkpoint, by GTID, when the
// new primary has every commit the follower applied; else at the new primary's current position, with every
// copy dropped (a gap). It reports false when it could not ask the new primary (run asks again).
func (f *Follower) resumeOnNewPrimary() bool {
	var s string
	err := f.metaQuery(func(c *client.Conn) error {
		r, err := c.Execute("SELECT @@gtid_binlog_pos")
		if err == nil {
			s, _ = r.GetString(0, 0)
		}
		return err
	})
	if err != nil {
		f.log.Warn("binlog follower: the group's new primary does not answer yet; retrying", "err", err)
		return false
	}
	f.mu.Lock()
	applied := positionOf(f.mu.gtids)
	f.mu.Unlock()
	has, perr := parseGTIDs(s)
	if f.server.Flavor == mysql.MariaDBFlavor && perr == nil && positionOf(has).Covers(applied) {
		f.log.Info("binlog follower follows the group's new primary from the commits it applied (GTID): none is missed, cached copies stay valid",
			"gtid", applied.String(), "new_primary_has", s)
		return true
	}
	f.log.Warn("binlog follower: the group's new primary lacks commits the follower applied (or has no GTID position to resume at): every cached copy is dropped and following restarts at the new primary's current position",
		"applied", applied.String(), "new_primary_has", s)
	if err := f.startAtCurrent(); err != nil {
		f.log.Warn("binlog follower: reading the new primary's position", "err", err)
		return false
	}
	f.o.Registry.InvalidateAll()
	f.gaps.Add(1)
	return true
}

// disconnected records a failed follow (see run): the first of an outage and the first failed reconnection are
// logged, the others counted.
func (f *Follower) disconnected(err error) {
	switch {
	case f.outage.since.IsZero():
		f.outage.since, f.outage.attempts = time.Now(), 0
		f.log.Warn("binlog follower disconnected: cached copies of this group are not served until it reconnects and catches up; reconnecting",
			"err", err)
	case f.outage.attempts == 0:
		f.outage.attempts = 1
		f.log.Warn("binlog follower cannot reconnect: it keeps trying (every "+f.o.RetryMax.String()+" at most) and logs again once it reconnects",
			"err", err)
	default:
		f.outage.attempts++
		f.log.Debug("binlog follower: reconnecting failed again", "attempts", f.outage.attempts, "err", err)
	}
}

// reconnected ends an outage (see run), logging how long it lasted.
func (f *Follower) reconnected() {
	if f.outage.since.IsZero() {
		return
	}
	f.log.Info("binlog follower reconnected; it serves cached copies again once it has caught up",
		"failed_attempts", f.outage.attempts, "down_for", time.Since(f.outage.since).Round(time.Millisecond).String())
	f.outage.since, f.outage.attempts = time.Time{}, 0
}

// follow runs one replication connection from the checkpoint until it fails.
func (f *Follower) follow() error {
	// The syncer dials once. Closing it would otherwise dial again to KILL its dump thread by id, and Dial reaches
	// the group's primary of the moment: after a failover or a switchover another server, where that id is some
	// other session's. Unkilled, the dump thread on the server left ends at its next write (a heartbeat).
	var dialed atomic.Bool
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dialed.Swap(true) {
			return nil, errors.New("binlog: the follower's replication connection is not dialed twice")
		}
		c, err := f.o.Dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		f.mu.stream = c
		repoint := f.mu.repoint
		f.mu.Unlock()
		if repoint { // PrimaryChanged came between follow's look and the dial
			c.Close()
		}
		return c, nil
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID:         f.o.ServerID,
		Flavor:           f.server.Flavor,
		Host:             "primary",
		User:             f.o.User,
		Password:         f.o.Password,
		TLSConfig:        f.o.TLS,
		Dialer:           client.Dialer(dial),
		HeartbeatPeriod:  time.Second,
		ReadTimeout:      5 * time.Second,
		DisableRetrySync: true,
		Logger:           slog.New(slog.DiscardHandler),
	})
	f.mu.Lock()
	if f.mu.repoint { // PrimaryChanged came first: this follow would read the former primary
		f.mu.Unlock()
		syncer.Close()
		return errRepoint
	}
	f.mu.syncer = syncer
	file, pos, gtids := f.mu.file, f.mu.pos, f.mu.gtids
	f.mu.Unlock()
	defer syncer.Close()
	var streamer *replication.BinlogStreamer
	var err error
	if f.server.Flavor == mysql.MariaDBFlavor {
		var set mysql.GTIDSet
		if set, err = mysql.ParseMariadbGTIDSet(gtidString(gtids)); err == nil {
			streamer, err = syncer.StartSyncGTID(set)
		}
	} else {
		streamer, err = syncer.StartSync(mysql.Position{Name: file, Pos: pos})
	}
	if err != nil {
		return err
	}
	f.reconnected() // before the follower counts as connected: its line comes before any "caught up"
	f.setState(Following, true, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-f.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			return err
		}
		f.events.Add(1)
		f.handle(ev)
	}
}

// handle applies one event.
func (f *Follower) handle(ev *replication.BinlogEvent) {
	switch e := ev.Event.(type) {
	case *replication.RotateEvent:
		f.mu.Lock()
		f.mu.file, f.mu.pos = string(e.NextLogName), uint32(e.Position)
		f.mu.Unlock()
		return
	case *replication.MariadbGTIDEvent:
		f.curGTID = e.GTID
		f.inTx = e.Flags&replication.BINLOG_MARIADB_FL_STANDALONE == 0
	case *replication.QueryEvent:
		switch q := strings.ToUpper(strings.TrimSpace(string(e.Query))); {
		case q == "BEGIN":
			f.inTx = true
		case q == "COMMIT":
			f.commit()
		case q == "ROLLBACK":
			f.discardOpenTx()
		case q == "" || strings.HasPrefix(q, "SAVEPOINT") || strings.HasPrefix(q, "XA "):
		default:
			f.ddl(string(e.Schema), string(e.Query))
			f.commit() // DDL commits implicitly
		}
	case *replication.XIDEvent:
		f.commit()
	case *replication.RowsEvent:
		f.rows(ev.Header.EventType, e)
		if !f.inTx {
			f.commit()
		}
	}
	if lp := ev.Header.LogPos; lp != 0 && !f.inTx {
		f.mu.Lock()
		f.mu.pos = lp
		f.mu.Unlock()
		f.checkProbes()
	}
}

// rows records the keys a rows event changes, to invalidate at commit.
func (f *Follower) rows(typ replication.EventType, e *replication.RowsEvent) {
	if e.Table == nil {
		return
	}
	id := validity.TableID{Schema: strings.ToLower(string(e.Table.Schema)), Name: strings.ToLower(string(e.Table.Table))}
	f.changedTable(id)
	t := f.o.Registry.Known(id)
	if t == nil {
		return // nothing cached of this table
	}
	watches := t.Watches()
	if len(watches) == 0 {
		f.pendWhole = append(f.pendWhole, t)
		return
	}
	cols := f.columnsOf(id, e.Table)
	images := imagesOf(typ)
	// The event's normalized keys share one array (they live as long as the commit's rechecks); raw is scratch.
	keys := make([]byte, 0, len(e.Rows)*len(watches)*16)
	var raw []byte
	norm := func(w validity.KeyWatch, v any) []byte {
		raw = appendValue(raw[:0], v)
		start := len(keys)
		keys = w.Norm(keys, raw)
		return keys[start:len(keys):len(keys)]
	}
	for wi, w := range watches {
		i, ok := cols[strings.ToLower(w.Column)]
		if !ok {
			f.pendWhole = append(f.pendWhole, t)
			continue
		}
		for r, row := range e.Rows {
			if i >= len(row) || row[i] == nil {
				f.pendWhole = append(f.pendWhole, t) // the key is not in the image
				continue
			}
			var key []byte
			if !w.Numeric {
				key = norm(w, row[i])
			} else if k, ok := validity.ColumnKey(nil, w.Column, row[i]); ok {
				key = k
			} else {
				f.pendWhole = append(f.pendWhole, t) // a value keys cannot be vouched for
				continue
			}
			p := pendingKey{t: t, key: key}
			if w.Holds != nil && images != noImages {
				if images == updateImages && r%2 == 0 {
					// A before image whose key the after image keeps is judged by the after image alone.
					if r+1 < len(e.Rows) {
						if next := e.Rows[r+1]; i < len(next) && next[i] != nil && string(norm(w, next[i])) == string(key) {
							continue
						}
					}
				} else {
					p.watch, p.img = &watches[wi], validity.RowImage{Columns: cols, Values: row}
				}
			}
			f.pendKeys = append(f.pendKeys, p)
		}
	}
}

// rowImages says what a rows event's rows are: after images (writes), before and after pairs (updates), or
// images a cache cannot be compared with (deletes, and event types the follower does not model).
type rowImages int

const (
	noImages rowImages = iota
	afterImages
	updateImages
)

func imagesOf(typ replication.EventType) rowImages {
	switch typ {
	case replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2, replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1:
		return afterImages
	case replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2, replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1:
		return updateImages
	}
	return noImages
}

// appendValue appends a row value as the table's key compares it: strings and bytes as they are, numbers in decimal.
func appendValue(dst []byte, v any) []byte {
	switch x := v.(type) {
	case string:
		return append(dst, x...)
	case []byte:
		return append(dst, x...)
	case int8, int16, int32, int64, int, uint8, uint16, uint32, uint64:
		return fmt.Appendf(dst, "%d", x)
	}
	return fmt.Append(dst, v)
}

// columnsOf returns the ordinals of t's columns by lower-case name: from the table map when the server logs
// column names (binlog_row_metadata=FULL), else from information_schema, kept until DDL names the table. A count
// that disagrees with the event (the table changed since) yields no columns, so the table is invalidated whole.
func (f *Follower) columnsOf(id validity.TableID, tm *replication.TableMapEvent) map[string]int {
	if names := tm.ColumnNameString(); len(names) > 0 {
		m := make(map[string]int, len(names))
		for i, n := range names {
			m[strings.ToLower(n)] = i
		}
		return m
	}
	m, ok := f.columns[id]
	if !ok {
		m = map[string]int{}
		err := f.metaQuery(func(c *client.Conn) error {
			r, err := c.Execute("SELECT LOWER(COLUMN_NAME), ORDINAL_POSITION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", id.Schema, id.Name)
			if err != nil {
				return err
			}
			for i := range r.RowNumber() {
				name, _ := r.GetString(i, 0)
				pos, _ := r.GetInt(i, 1)
				m[name] = int(pos) - 1
			}
			return nil
		})
		if err != nil {
			f.log.Warn("binlog follower: reading a table's columns; its changes invalidate it whole", "table", id.String(), "err", err)
			return nil
		}
		f.columns[id] = m
	}
	if uint64(len(m)) != tm.ColumnCount {
		return nil
	}
	return m
}

// TableKind reports whether table id exists on the primary (found) and is one whose writes the binlog names under
// its own name (trusted): a base table (system-versioned too) of a storage engine that keeps its rows on this
// server. Views, sequences and tables of engines such as FEDERATED, CONNECT or SPIDER are not.
func (f *Follower) TableKind(id validity.TableID) (trusted, found bool, err error) {
	err = f.metaQuery(func(c *client.Conn) error {
		r, err := c.Execute("SELECT TABLE_TYPE, UPPER(IFNULL(ENGINE, '')) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", id.Schema, id.Name)
		if err != nil || r.RowNumber() == 0 {
			return err
		}
		found = true
		kind, _ := r.GetString(0, 0)
		engine, _ := r.GetString(0, 1)
		trusted = (kind == "BASE TABLE" || kind == "SYSTEM VERSIONED") && loggedEngines[engine]
		return nil
	})
	return trusted, found, err
}

// loggedEngines keep their rows on the server, so every change of them is in its binlog.
var loggedEngines = map[string]bool{"INNODB": true, "MYISAM": true, "ARIA": true, "MEMORY": true, "ROCKSDB": true}

// ddl invalidates every table query names (in default database schema), and raises their positions, at commit;
// everything when it does not parse.
func (f *Follower) ddl(schema, query string) {
	f.ddls.Add(1)
	stmts, _, err := f.parser.Parse(query, "", "")
	if err != nil || len(stmts) == 0 {
		f.tables.Add(1)
		f.pendAll = true // commit notes every table's position, then drops every copy
		return
	}
	var tc sqlnames.Collector
	for _, st := range stmts {
		tc.Collect(st)
	}
	ids := validity.Resolve(strings.ToLower(schema), tc.Tables())
	for _, id := range ids {
		f.changedTable(id)
	}
	for _, t := range f.o.Registry.Lookup(ids) {
		f.pendWhole = append(f.pendWhole, t)
		delete(f.columns, t.ID())
		t.ForgetKind() // a table dropped and created again as a view is not trusted
	}
}

// changedTable adds id to the tables the open transaction changed, once.
func (f *Follower) changedTable(id validity.TableID) {
	for i := len(f.pendTables) - 1; i >= 0; i-- { // a transaction's events of one table come together, mostly
		if f.pendTables[i] == id {
			return
		}
	}
	f.pendTables = append(f.pendTables, id)
}

// notePosition notes the open transaction's GTID on the group's gate, as the position of the tables it changed
// (pendTables), or of every table (pendAll); with neither, as the group's newest. It runs before the
// transaction's invalidations are applied: a stamp taken after them finds the position noted (see package
// validity). MariaDB only: a MySQL follower notes nothing, and the group's positions stay zero.
func (f *Follower) notePosition() {
	if f.server.Flavor != mysql.MariaDBFlavor || f.curGTID.SequenceNumber == 0 {
		return
	}
	pos := validity.PositionOf(validity.GTID{Domain: f.curGTID.DomainID, Server: f.curGTID.ServerID, Seq: f.curGTID.SequenceNumber})
	if f.pendAll {
		f.gate.NoteAll(pos)
	} else {
		f.gate.NoteCommit(f.pendTables, pos)
	}
}

// commit applies the open transaction's invalidations and moves the checkpoint past it.
func (f *Follower) commit() {
	f.notePosition()
	if f.pendAll {
		f.o.Registry.InvalidateAll()
		clear(f.columns)
	}
	for i := range f.pendKeys {
		f.pendKeys[i].apply(true) // every watched key of the row is reported (see rows); keeps what the recheck needs
	}
	for _, t := range f.pendWhole {
		t.Invalidate()
	}
	f.keys.Add(uint64(len(f.pendKeys)))
	f.tables.Add(uint64(len(f.pendWhole)))
	f.commits.Add(1)
	if len(f.pendKeys)+len(f.pendWhole) > 0 {
		r := recheck{due: time.Now().Add(f.recheckDelay()), keys: f.pendKeys, whole: slices.Clone(f.pendWhole)}
		f.recheckMu.Lock()
		f.rechecks = append(f.rechecks, r)
		if n := len(f.spareKeys); n > 0 {
			f.pendKeys, f.spareKeys = f.spareKeys[n-1], f.spareKeys[:n-1]
		} else {
			// Sized as this commit's: the next commit is likely the same kind (a write-behind batch's rows), and
			// growing an array by doubling to hundreds of keys left as much again behind as garbage. Not past what
			// a spare may hold: one bulk commit should not make every next array as large.
			f.pendKeys = make([]pendingKey, 0, min(len(r.keys), maxSpareKeyCap))
		}
		f.recheckMu.Unlock()
	}
	f.discardOpenTx()
	if f.server.Flavor == mysql.MariaDBFlavor && f.curGTID.SequenceNumber != 0 {
		f.mu.Lock()
		f.mu.gtids[f.curGTID.DomainID] = f.curGTID
		f.mu.Unlock()
	}
}

func (f *Follower) discardOpenTx() {
	f.pendKeys, f.pendWhole, f.inTx = f.pendKeys[:0], f.pendWhole[:0], false
	f.pendTables, f.pendAll = f.pendTables[:0], false
}

// probeInterval is how often the primary's position is asked: a tenth of max_staleness, within [10ms, 250ms].
func (f *Follower) probeInterval() time.Duration {
	return min(max(f.o.MaxStaleness/10, 10*time.Millisecond), 250*time.Millisecond)
}

// recheckDelay is how long after a commit's invalidations they are applied again: two probe intervals (the probe
// loop applies them at its next tick after that, so within three, three tenths of max_staleness when that is
// 100 ms to 2.5 s; see the package comment).
func (f *Follower) recheckDelay() time.Duration { return 2 * f.probeInterval() }

// applyRechecks applies again the invalidations that are due at now.
func (f *Follower) applyRechecks(now time.Time) {
	f.recheckMu.Lock()
	n := 0
	for n < len(f.rechecks) && !f.rechecks[n].due.After(now) {
		n++
	}
	due := slices.Clone(f.rechecks[:n])
	f.rechecks = slices.Delete(f.rechecks, 0, n)
	f.recheckMu.Unlock()
	for _, r := range due {
		for i := range r.keys {
			r.keys[i].apply(false)
		}
		for _, t := range r.whole {
			t.Invalidate()
		}
	}
	f.recheckMu.Lock()
	for _, r := range due {
		if len(f.spareKeys) < maxSpareKeys && cap(r.keys) <= maxSpareKeyCap {
			clear(r.keys) // the rows' keys and images go to the collector
			f.spareKeys = append(f.spareKeys, r.keys[:0])
		}
	}
	f.recheckMu.Unlock()
}

// maxSpareKeys and maxSpareKeyCap bound the key arrays kept for reuse (spareKeys): as many as a few probe ticks'
// commits hand over, each no larger than a write-behind batch's keys.
const (
	maxSpareKeys   = 64
	maxSpareKeyCap = 4096
)

// maxProbes bounds the probes waiting to be reached; past it new probes are skipped until the follower catches up.
const maxProbes = 256

func (f *Follower) probeLoop() {
	defer f.done.Done()
	tick := time.NewTicker(f.probeInterval())
	defer tick.Stop()
	wasFresh := false
	for {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		at := time.Now()
		f.applyRechecks(at)
		f.mu.Lock()
		gen := f.mu.primaryGen
		f.mu.Unlock()
		if file, pos, err := f.masterPos(); err == nil {
			f.mu.Lock()
			if len(f.mu.probes) < maxProbes && f.mu.primaryGen == gen { // coordinates of the primary followed now
				f.mu.probes = append(f.mu.probes, probe{at, file, pos})
			}
			f.mu.Unlock()
			f.checkProbes()
		}
		if fresh := f.voucher.Fresh(); fresh != wasFresh {
			wasFresh = fresh
			if fresh {
				f.log.Info("binlog follower caught up: cached copies are served again")
			} else {
				f.log.Warn("binlog follower is behind max_staleness or disconnected: reads bypass cached copies", "max_staleness", f.o.MaxStaleness.String())
			}
		}
	}
}

// checkProbes vouches for the latest probe the applied position has reached.
func (f *Follower) checkProbes() {
	f.mu.Lock()
	var reached time.Time
	for len(f.mu.probes) > 0 && f.mu.connected && !before(f.mu.file, f.mu.pos, f.mu.probes[0].file, f.mu.probes[0].pos) {
		reached = f.mu.probes[0].at
		f.mu.probes = f.mu.probes[1:]
	}
	if !reached.IsZero() {
		f.mu.freshAt = reached
	}
	f.mu.Unlock()
	if !reached.IsZero() {
		f.voucher.Vouch(reached.Add(f.o.MaxStaleness))
	}
}

// before reports whether binlog position (file, pos) comes before (pfile, ppos). Binlog file names share a base
// and a zero-padded sequence, so longer names and then greater names are later.
func before(file string, pos uint32, pfile string, ppos uint32) bool {
	if file != pfile {
		if len(file) != len(pfile) {
			return len(file) < len(pfile)
		}
		return file < pfile
	}
	return pos < ppos
}

// masterPos asks the primary where its binlog ends.
func (f *Follower) masterPos() (file string, pos uint32, err error) {
	err = f.metaQuery(func(c *client.Conn) error {
		r, err := c.Execute("SHOW MASTER STATUS")
		if err != nil {
			return err
		}
		if r.RowNumber() == 0 {
			return errors.New("SHOW MASTER STATUS returned no row: the binary log is off")
		}
		file, _ = r.GetString(0, 0)
		p, _ := r.GetUint(0, 1)
		pos = uint32(p)
		return nil
	})
	return file, pos, err
}

// metaQuery runs fn on the follower's query connection, reconnecting it once if it fails, and after the group
// followed a new primary (PrimaryChanged).
func (f *Follower) metaQuery(fn func(*client.Conn) error) error {
	f.metaMu.Lock()
	defer f.metaMu.Unlock()
	f.mu.Lock()
	gen := f.mu.primaryGen
	f.mu.Unlock()
	if f.meta != nil && f.metaGen != gen {
		f.meta.Close()
		f.meta = nil
	}
	for attempt := 0; ; attempt++ {
		if f.meta == nil {
			c, err := connect(context.Background(), f.o)
			if err != nil {
				return err
			}
			f.meta, f.metaGen = c, gen
		}
		err := fn(f.meta)
		if err == nil || attempt > 0 {
			return err
		}
		var me *mysql.MyError
		if errors.As(err, &me) {
			return err // the server answered: the connection is fine
		}
		f.meta.Close()
		f.meta = nil
	}
}

// parseGTIDs reads a MariaDB GTID position ("0-1-5,1-1-2") into the last GTID of each domain.
func parseGTIDs(s string) (map[uint32]mysql.MariadbGTID, error) {
	gtids := map[uint32]mysql.MariadbGTID{}
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		g, err := mysql.ParseMariadbGTID(part)
		if err != nil {
			return nil, fmt.Errorf("GTID position %q: %w", s, err)
		}
		gtids[g.DomainID] = *g
	}
	return gtids, nil
}

// positionOf is a MariaDB GTID position as package validity keeps it (nil: the zero position).
func positionOf(g map[uint32]mysql.MariadbGTID) validity.Position {
	var p validity.Position
	for _, x := range g {
		p = p.Merge(validity.PositionOf(validity.GTID{Domain: x.DomainID, Server: x.ServerID, Seq: x.SequenceNumber}))
	}
	return p
}

// gtidString formats a MariaDB GTID position, domains in order.
func gtidString(g map[uint32]mysql.MariadbGTID) string {
	parts := make([]string, 0, len(g))
	for _, d := range slices.Sorted(maps.Keys(g)) {
		x := g[d]
		parts = append(parts, fmt.Sprintf("%d-%d-%d", x.DomainID, x.ServerID, x.SequenceNumber))
	}
	return strings.Join(parts, ",")
}

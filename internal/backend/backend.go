// Package backend is keyway's one road to MySQL/MariaDB: a Topology of groups of servers (each group's primary and
// its read replicas), and per group a health monitor, connection pools for the SQL door keyed by the backend user
// and the capability flags that change the protocol, and a dialer that containers' database/sql pools (SQLConfig)
// and the binlog followers (ReplicaLogin) use. The SQL door, containers, write-behind and the binlog followers all
// reach a server through a Group, so which member serves (the primary; a replica that covers a read's position,
// ReadMember in replicas.go; later a promoted primary, shards) is decided here alone, and all of them see the same
// "backend down". Writes only ever go to the primary.
//
// Invariants:
//   - A pooled connection's session state is known: it tracks it (CLIENT_SESSION_TRACK, every variable) and
//     Conn.State records what the server reported, so a borrower is brought in line with one SET or COM_INIT_DB
//     (state.go); one left with state keyway does not carry (MarkDirty) went through COM_RESET_CONNECTION first.
//     A connection in an unknown state (mid-result, an I/O error, a failed reset, marked broken) is closed, never
//     pooled.
//   - Borrowers that wait are served first come first served: a released connection goes to the first waiter.
//   - A connection in a pool with key K negotiated exactly K.Caps of mysqlwire.ProtocolCaps (always with
//     CLIENT_SESSION_TRACK, which keyway strips from OK packets for a client that did not ask for it) and K.ExtCaps of
//     mysqlwire.ExtProtocolCaps (MariaDB's extended capabilities) with the backend, so it can serve any client that
//     negotiated the same flags with keyway: their packets are the same.
//   - At most Group.MaxOpen connections per pool exist (open counts dials in progress), and at most the group's
//     budget (GroupOptions.MaxConnections, by default the server's max_connections less a reserve, see
//     budgetFor) across all its pools together, so keyway never takes the server's last connections from its
//     other clients (root going direct, the binlog follower, the monitor). Get waits, bounded by its context and
//     ConnectTimeout, when either is exhausted; while a pool waits for the budget, idle connections of other
//     pools are closed to make room rather than kept until IdleTimeout.
//   - An unreachable backend is an *UnavailableError naming the group and address. After a failed dial, dials fail
//     fast for a short, growing backoff (50ms … 1s) so a dead backend costs clients no connect timeouts; a
//     successful dial or health check ends the backoff.
//   - TLS to a backend is keyway's own concern, set per group (GroupOptions.TLS, after MySQL's ssl-mode) and applied
//     on every road to the group: the pools' connections, the health monitor (with or without credentials) and the
//     database/sql pools of SQLConfig. "required" and "verify" never log in in plaintext: a server without TLS, or
//     whose certificate does not verify, is a *TLSError naming the group and the key, inside an *UnavailableError
//     where a dial failed. CLIENT_SSL is not one of mysqlwire.ProtocolCaps, so TLS never changes a PoolKey and a
//     TLS backend connection serves clients with or without TLS alike.
//   - Over TLS, caching_sha2_password full authentication sends the password inside the TLS channel and fetches no
//     RSA key; without TLS ("off", or "preferred" against a server without TLS) it uses RSA, never plaintext.
//   - Nothing here panics; every goroutine stops on Group.Close.
package backend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/sockio"
)

// Defaults for zero fields of GroupOptions (the config fills them in already; these serve callers such as tests
// that build a Group directly).
const (
	DefaultMaxOpen        = 256
	DefaultIdleTimeout    = 60 * time.Second
	DefaultHealthInterval = 2 * time.Second
	DefaultConnectTimeout = 5 * time.Second

	resetTimeout = 5 * time.Second
	minBackoff   = 50 * time.Millisecond
	maxBackoff   = time.Second
)

// UnavailableError says a backend group could not be reached.
type UnavailableError struct {
	Group, Addr string
	Err         error
}

func (e *UnavailableError) Error() string {
	return "keyway: backend group " + e.Group + " (" + e.Addr + ") unavailable: " + e.Err.Error()
}
func (e *UnavailableError) Unwrap() error { return e.Err }

// BusyError says the backend refused a new connection because it has too many (ER_CON_COUNT_ERROR, 1040), or that
// the group's connection budget stayed used up for the whole wait (Err is then keyway's own 1040). The backend is
// up: the client gets a 1040, which drivers and their retry logic know.
type BusyError struct {
	Group, Addr string
	Err         *mysqlwire.Error // the server's 1040
}

func (e *BusyError) Error() string {
	return "keyway: backend group " + e.Group + " (" + e.Addr + "): " + e.Err.Message
}
func (e *BusyError) Unwrap() error { return e.Err }

// LoginError says the backend refused keyway's credentials for a user: fix backend_user/backend_password.
type LoginError struct {
	Group, Addr, User string
	Err               error
}

func (e *LoginError) Error() string {
	return "keyway: backend group " + e.Group + " (" + e.Addr + ") refused login as '" + e.User + "': " + e.Err.Error() +
		" (check backend_user/backend_password in [[sql.users]])"
}
func (e *LoginError) Unwrap() error { return e.Err }

// PoolKey identifies a pool within a group.
type PoolKey struct {
	User      string // backend user
	Caps      uint32 // client capability flags & mysqlwire.ProtocolCaps
	ExtCaps   uint32 // the client's MariaDB extended capabilities & mysqlwire.ExtProtocolCaps
	Collation uint8  // the connection's character set/collation from the handshake (COM_RESET_CONNECTION restores it)
}

// PoolStats is a pool's state for metrics. User, Caps, ExtCaps and Collation are its PoolKey: what tells two pools
// of a group apart (clients that negotiated different flags or character sets get separate pools).
type PoolStats struct {
	Group, Address, User string
	Caps, ExtCaps        uint32
	Collation            uint8
	Open, Idle, InUse    int // InUse: borrowed by a statement or held by a pinned session
	Waits, Errors        int64
	// Waiting are the borrowers waiting now; Gets the connections handed out (one per unpinned statement);
	// Fixups the commands sent to bring a borrowed connection in line with its session; WaitTime the time
	// borrowers spent waiting.
	Waiting      int
	Gets, Fixups int64
	WaitTime     time.Duration
}

// Member is one server of a group, where keyway dials it.
type Member struct {
	Network string // "tcp" or "unix"
	Address string // host:port, or a unix socket path
}

// GroupOptions configure a Group.
type GroupOptions struct {
	Name    string
	Primary Member
	// User and Password are keyway's own account on the group: the health monitor (when set) and the
	// database/sql pools of containers log in with it.
	User, Password string
	MinIdle        int           // connections kept open per pool
	MaxOpen        int           // connections per pool at most
	MaxConnections int           // all pools together at most (the budget); 0: from the server's (budgetFor), < 0: none
	IdleTimeout    time.Duration // idle connections above MinIdle close after this
	HealthInterval time.Duration // how often the monitor checks the primary
	ConnectTimeout time.Duration // dialing and handshake
	// PoolWait is the longest a borrower waits for a pool's connection when all are in use (0: ConnectTimeout).
	PoolWait time.Duration
	// TLS is how every connection keyway opens to the group uses TLS: TLSOff, TLSPreferred (the default),
	// TLSRequired or TLSVerify. TLSCA is a PEM file of CAs for TLSVerify ("" = the system roots) and TLSServerName
	// the name the certificate must carry ("" = the primary's host).
	TLS, TLSCA, TLSServerName string
	Logger                    *slog.Logger

	// Replicas are the group's read replicas: MariaDB servers replicating from Primary with GTIDs. ReadFrom says
	// which servers take the reads that may leave the primary (ReadPrimary, the default, ReadReplicas, ReadAny), and
	// MaxReplicaLag how far behind the primary a replica may be and still take reads no write of keyway's
	// constrains (0: DefaultMaxReplicaLag).
	Replicas      []Replica
	ReadFrom      string
	MaxReplicaLag time.Duration
	// OnNewPrimary, when set, is told when the group follows a new primary (a replica became the only writable
	// member that replicates from no one: an operator or an orchestrator promoted it). Called on the group's
	// position watcher: it must not block long.
	OnNewPrimary func(NewPrimary)
	// ReplicationUser and ReplicationPassword are the account a former primary replicates from the new one with
	// after a switchover (REPLICATION SLAVE).
	ReplicationUser, ReplicationPassword string
}

// Replica is a read replica of a group, and its share of the reads sent to replicas (Weight, 1 when 0).
type Replica struct {
	Member
	Weight int
}

// Where a group's reads go (GroupOptions.ReadFrom).
const (
	ReadPrimary  = "primary"  // every statement goes to the primary: replicas, if any, are only watched
	ReadReplicas = "replicas" // reads a replica covers go to a replica, the rest to the primary
	ReadAny      = "any"      // as ReadReplicas, with the primary taking its share of those reads too
)

// DefaultMaxReplicaLag is GroupOptions.MaxReplicaLag's default.
const DefaultMaxReplicaLag = 5 * time.Second

func (o *GroupOptions) ensureDefaults() {
	if o.MaxOpen <= 0 {
		o.MaxOpen = DefaultMaxOpen
	}
	o.MinIdle = min(max(o.MinIdle, 0), o.MaxOpen)
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.PoolWait <= 0 {
		o.PoolWait = o.ConnectTimeout
	}
	if o.ReadFrom == "" {
		o.ReadFrom = ReadPrimary
	}
	if o.MaxReplicaLag <= 0 {
		o.MaxReplicaLag = DefaultMaxReplicaLag
	}
	if o.Primary.Network == "" {
		o.Primary.Network = "tcp"
	}
	if o.TLS == "" {
		o.TLS = DefaultTLS
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// server is a member's address and the client TLS configuration of every dial to it (nil for TLSOff); tlsErr, when
// set, is why it could not be built, and every dial fails with it.
type server struct {
	Member
	tls    *tls.Config
	tlsErr error
}

// Group is one backend group: its members, a health monitor and the pools.
type Group struct {
	cfg GroupOptions
	// log names the group; a line about its server adds "addr", g.Addr() when it is written, since the server
	// changes when the group follows a new primary (a member's with it).
	log *slog.Logger
	// srv is where the group's connections go; it changes only when the group follows a new primary (swapServers).
	// gen counts those changes: a connection dialed before the last one is closed when it comes back.
	srv atomic.Pointer[server]
	gen atomic.Uint64

	stop chan struct{}
	wg   sync.WaitGroup

	rs replicaState // the group's replicas and their positions (replicas.go)
	// asReplica is the replica this group is the member of, for a group a parent made of one of its replicas.
	asReplica *replicaMember

	// stmtsPerConn bounds the statements prepared on one pooled connection (stmts.go): MaxStmtsPerConn, or less so
	// that the budget's connections together keep within half the server's max_prepared_stmt_count.
	stmtsPerConn atomic.Int32

	mu struct {
		sync.Mutex
		pools     map[PoolKey]*Pool
		info      *mysqlwire.ServerInfo // the last handshake seen
		down      bool
		lastErr   error
		failUntil time.Time // dials fail fast with lastErr until then
		backoff   time.Duration
		// downSince is when the group went down and failures counts the failed dials and health checks since, for
		// the one line that says it is up again (an outage logs its changes of state, not each attempt).
		downSince time.Time
		failures  int
		closed    bool
		// budget is the most connections all pools together may hold (0 = unbounded); budgetUsed counts them
		// (dials in progress included), and budgetWaiters are pools' Gets waiting for budget: closed, all at
		// once, when a connection of any pool closes, so each retries.
		budget        int
		budgetUsed    int
		budgetWaiters []chan struct{}
		budgetKnown   bool // budget is set (configured, or read from the server)
		stmtsKnown    bool // stmtsPerConn was set from the server's max_prepared_stmt_count
		// monitorRefused is the server's last refusal of the monitoring account ("" while it logs in), so the
		// warning is logged once per distinct refusal, not every HealthInterval.
		monitorRefused string
	}
}

// NewGroup starts the group's health monitor and pool maintenance. Zero fields of o take the defaults above.
func NewGroup(o GroupOptions) *Group {
	o.ensureDefaults()
	g := &Group{cfg: o, log: o.Logger.With("group", o.Name), stop: make(chan struct{})}
	tc, tlsErr := o.tlsConfig()
	g.srv.Store(&server{Member: o.Primary, tls: tc, tlsErr: tlsErr})
	g.stmtsPerConn.Store(MaxStmtsPerConn)
	g.mu.pools = make(map[PoolKey]*Pool)
	if o.MaxConnections != 0 {
		g.mu.budget, g.mu.budgetKnown = max(o.MaxConnections, 0), true
	}
	g.wg.Add(2)
	go g.monitor()
	go g.maintain()
	g.startReplicas(o)
	return g
}

// Name is the group's name; Addr its primary's address.
func (g *Group) Name() string { return g.cfg.Name }
func (g *Group) Addr() string { return g.srv.Load().Address }

// ServerInfo returns the last handshake the primary sent (version, capabilities), or nil before any.
func (g *Group) ServerInfo() *mysqlwire.ServerInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.info
}

// Healthy reports whether the last health check or dial succeeded, and the last error otherwise.
func (g *Group) Healthy() (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.mu.down, g.mu.lastErr
}

// Pool returns the pool for key, creating it (empty) on first use. password is the backend password for key.User.
func (g *Group) Pool(key PoolKey, password string) *Pool {
	// Every pooled connection tracks session state (state.go), whether the client asked for the tracking or not.
	key.Caps = (key.Caps | mysqlwire.ClientSessionTrack) & mysqlwire.ProtocolCaps
	key.ExtCaps &= mysqlwire.ExtProtocolCaps
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.mu.pools[key]
	if p == nil {
		p = &Pool{g: g, key: key, password: password}
		g.mu.pools[key] = p
	}
	return p
}

// budgetFor is the default budget for a server with maxConnections: a tenth of them, at least 5, stay for
// everyone but keyway's pools (the binlog follower, the health monitor, containers' database/sql pools, admins
// connecting directly); at least 1 is keyway's. MariaDB's default 151 gives 136.
func budgetFor(maxConnections int) int {
	return max(maxConnections-max(maxConnections/10, 5), 1)
}

// MaxConnections returns the group's budget across its pools (0: unbounded, or not yet known).
func (g *Group) MaxConnections() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.budget
}

// learnBudget reads the server's max_connections on c, a fresh logged-in connection, and sets the default budget
// from it once. A failed read leaves the budget unknown (the next login tries again) and c usable unless the read
// broke it (then c is marked broken).
func (g *Group) learnBudget(c *Conn) {
	g.mu.Lock()
	known := g.mu.budgetKnown && g.mu.stmtsKnown
	g.mu.Unlock()
	if known {
		return
	}
	_ = c.SetDeadline(time.Now().Add(g.cfg.ConnectTimeout))
	vals, err := c.queryStrings("SELECT @@GLOBAL.max_connections, @@GLOBAL.max_prepared_stmt_count")
	_ = c.SetDeadline(time.Time{})
	var maxConns, maxStmts int
	if err == nil {
		maxConns, err = strconv.Atoi(vals[0])
	}
	if err == nil {
		maxStmts, err = strconv.Atoi(vals[1])
	}
	if err != nil {
		g.log.Debug("reading max_connections and max_prepared_stmt_count failed", "addr", g.Addr(), "err", err)
		return
	}
	g.mu.Lock()
	if !g.mu.budgetKnown {
		g.mu.budget, g.mu.budgetKnown = budgetFor(maxConns), true
		g.log.Info("backend connection budget", "addr", g.Addr(), "max_connections", maxConns, "budget", g.mu.budget)
	}
	if !g.mu.stmtsKnown {
		conns := g.mu.budget
		if conns <= 0 {
			conns = g.cfg.MaxOpen
		}
		// Half the server's statements at most, so keyway's connections together never take them all.
		g.stmtsPerConn.Store(int32(min(max(maxStmts/(2*conns), 1), MaxStmtsPerConn)))
		g.mu.stmtsKnown = true
	}
	g.mu.Unlock()
}

// takeBudget counts one more connection against the budget, or reports false when it is used up.
func (g *Group) takeBudget() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.budget > 0 && g.mu.budgetUsed >= g.mu.budget {
		return false
	}
	g.mu.budgetUsed++
	return true
}

// returnBudget gives back n connections' budget and lets every waiting Get retry.
func (g *Group) returnBudget(n int) {
	if n == 0 {
		return
	}
	g.mu.Lock()
	g.mu.budgetUsed -= n
	ws := g.mu.budgetWaiters
	g.mu.budgetWaiters = nil
	g.mu.Unlock()
	for _, w := range ws {
		close(w)
	}
}

// waitBudget registers a Get waiting for budget; the channel closes when budget may be free.
func (g *Group) waitBudget() chan struct{} {
	ch := make(chan struct{})
	g.mu.Lock()
	g.mu.budgetWaiters = append(g.mu.budgetWaiters, ch)
	g.mu.Unlock()
	return ch
}

func (g *Group) stopWaitingBudget(ch chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, w := range g.mu.budgetWaiters {
		if w == ch {
			g.mu.budgetWaiters = append(g.mu.budgetWaiters[:i], g.mu.budgetWaiters[i+1:]...)
			return
		}
	}
}

// budgetWaited reports whether a Get waits for budget.
func (g *Group) budgetWaited() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.mu.budgetWaiters) > 0
}

// evictIdle closes the longest-idle connection of a pool other than p, to make budget for p. It reports whether it
// closed one.
func (g *Group) evictIdle(p *Pool) bool {
	g.mu.Lock()
	pools := make([]*Pool, 0, len(g.mu.pools))
	for _, q := range g.mu.pools {
		if q != p {
			pools = append(pools, q)
		}
	}
	g.mu.Unlock()
	var victim *Conn
	var from *Pool
	for _, q := range pools {
		q.mu.Lock()
		if len(q.mu.idle) > 0 && (victim == nil || q.mu.idle[0].idleSince.Before(victim.idleSince)) {
			victim, from = q.mu.idle[0], q
		}
		q.mu.Unlock()
	}
	if victim == nil {
		return false
	}
	from.mu.Lock()
	i := slices.Index(from.mu.idle, victim)
	if i < 0 { // checked out meanwhile: look again
		from.mu.Unlock()
		return g.evictIdle(p)
	}
	from.mu.idle = slices.Delete(from.mu.idle, i, i+1)
	from.mu.open--
	from.mu.Unlock()
	quit(victim)
	g.returnBudget(1)
	return true
}

// Stats returns the state of every pool of the group, its replicas' included.
func (g *Group) Stats() []PoolStats {
	g.mu.Lock()
	pools := make([]*Pool, 0, len(g.mu.pools))
	for _, p := range g.mu.pools {
		pools = append(pools, p)
	}
	g.mu.Unlock()
	out := make([]PoolStats, 0, len(pools))
	for _, p := range pools {
		out = append(out, p.Stats())
	}
	for _, r := range g.rs.replicas { // their pools carry the replica's address
		out = append(out, r.Stats()...)
	}
	return out
}

// Close stops the monitor and closes every idle connection; connections in use are closed when returned.
func (g *Group) Close() {
	g.mu.Lock()
	if g.mu.closed {
		g.mu.Unlock()
		return
	}
	g.mu.closed = true
	pools := make([]*Pool, 0, len(g.mu.pools))
	for _, p := range g.mu.pools {
		pools = append(pools, p)
	}
	g.mu.Unlock()
	close(g.stop)
	g.wg.Wait()
	g.closeReplicas()
	for _, p := range pools {
		p.close()
	}
}

func (g *Group) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.closed
}

// dial opens and logs in a backend connection. Network and handshake I/O failures are *UnavailableError and start
// the fast-fail backoff; "too many connections" is a *BusyError, any other refusal by the server a *LoginError.
func (g *Group) dial(ctx context.Context, user, password string, caps, ext uint32, collation uint8) (*Conn, error) {
	if err := g.failingFast(); err != nil {
		return nil, err
	}
	c, err := g.connect(ctx, user, password, caps, ext, collation)
	if err != nil {
		var me *mysqlwire.Error
		if errors.As(err, &me) && me.Code == mysqlwire.ERConCount {
			// The server is up and answering; it is full. That is no reason to mark it down and drop every
			// pool's idle connections (which other sessions would only have to dial again).
			return nil, &BusyError{Group: g.cfg.Name, Addr: g.Addr(), Err: me}
		}
		if me != nil {
			return nil, &LoginError{Group: g.cfg.Name, Addr: g.Addr(), User: user, Err: err}
		}
		g.failed(err)
		return nil, &UnavailableError{Group: g.cfg.Name, Addr: g.Addr(), Err: err}
	}
	g.succeeded(c.Info)
	if got := c.Capabilities & mysqlwire.ProtocolCaps; got != caps&mysqlwire.ProtocolCaps {
		c.Close()
		return nil, fmt.Errorf("keyway: backend group %s (%s) does not support capability flags 0x%x the client negotiated: reconnect the client",
			g.cfg.Name, g.Addr(), caps&^got&mysqlwire.ProtocolCaps)
	}
	if c.ExtCapabilities != ext&mysqlwire.ExtProtocolCaps {
		c.Close()
		return nil, fmt.Errorf("keyway: backend group %s (%s) does not support the MariaDB extended capabilities 0x%x the client negotiated: reconnect the client",
			g.cfg.Name, g.Addr(), ext&^c.ExtCapabilities)
	}
	return c, nil
}

// failingFast returns the *UnavailableError of the last failure while the group is in its fast-fail backoff.
func (g *Group) failingFast() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.mu.lastErr; err != nil && time.Now().Before(g.mu.failUntil) {
		return &UnavailableError{Group: g.cfg.Name, Addr: g.Addr(), Err: err}
	}
	return nil
}

// DialWritable dials the group's current writable member (today its primary) for connections that keyway does not
// pool itself: the binlog follower's (ReplicaLogin), and, through dialPooled, the containers' database/sql pools
// (go-sql-driver's Config.DialFunc; see SQLConfig).
// It shares the group's health state with the SQL door: while the group fails fast it returns the
// *UnavailableError at once, and a failed dial marks the group down. The network and address the driver passes are
// ignored: the group decides where to go.
func (g *Group) DialWritable(ctx context.Context, _, _ string) (net.Conn, error) {
	return g.dialWritable(ctx, false)
}

// dialPooled is DialWritable for the containers' database/sql pools (SQLConfig): the connection checks itself
// before each request that follows a response (sockio.WrapPooled), in place of go-sql-driver's liveness check.
func (g *Group) dialPooled(ctx context.Context, _, _ string) (net.Conn, error) {
	return g.dialWritable(ctx, true)
}

func (g *Group) dialWritable(ctx context.Context, pooled bool) (net.Conn, error) {
	if err := g.fenced(); err != nil {
		return nil, err
	}
	if err := g.failingFast(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.ConnectTimeout)
	defer cancel()
	nc, err := g.dialNet(ctx)
	if err == nil && pooled {
		nc = sockio.WrapPooled(nc) // before requireTLSOffer, which may wrap it again
	}
	if err == nil && (g.cfg.TLS == TLSRequired || g.cfg.TLS == TLSVerify) {
		dl, _ := ctx.Deadline()
		var rc net.Conn
		if rc, err = g.requireTLSOffer(nc, dl); err != nil {
			nc.Close()
		}
		nc = rc
	}
	if err != nil {
		g.failed(err)
		return nil, &UnavailableError{Group: g.cfg.Name, Addr: g.Addr(), Err: err}
	}
	return nc, nil
}

// dialNet opens a network connection to the primary, or fails with the group's TLS configuration error.
func (g *Group) dialNet(ctx context.Context) (net.Conn, error) {
	srv := g.srv.Load()
	if srv.tlsErr != nil {
		return nil, srv.tlsErr
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, srv.Network, srv.Address)
	if err != nil {
		return nil, err
	}
	// Raw-call reads and writes (sockio) for every connection to the primary: the containers' pools and the binlog
	// follower (through DialWritable) as much as the SQL door's backends.
	return sockio.Wrap(nc), nil
}

// connect dials and runs the client handshake, bounded by ConnectTimeout.
func (g *Group) connect(ctx context.Context, user, password string, caps, ext uint32, collation uint8) (*Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.ConnectTimeout)
	defer cancel()
	nc, err := g.dialNet(ctx)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	mc := mysqlwire.NewConn(nc)
	info, err := mysqlwire.ClientHandshake(mc, &mysqlwire.ClientConfig{
		User: user, Password: password, Capabilities: caps, ExtCapabilities: ext, Collation: collation,
		TLS: g.srv.Load().tls, TLSOptional: g.cfg.TLS == TLSPreferred,
	})
	if err != nil {
		mc.Close()
		return nil, g.tlsFailure(err)
	}
	_ = nc.SetDeadline(time.Time{})
	return &Conn{Conn: mc, Info: info, Status: info.Status}, nil
}

// failed records a failed dial or health check: the group is down and dials fail fast for a growing backoff. Going
// down is logged; the failures that follow are counted (see succeeded).
func (g *Group) failed(err error) {
	g.mu.Lock()
	wasDown := g.mu.down
	g.mu.down, g.mu.lastErr = true, err
	g.mu.backoff = min(max(2*g.mu.backoff, minBackoff), maxBackoff)
	g.mu.failUntil = time.Now().Add(g.mu.backoff)
	if !wasDown {
		g.mu.downSince, g.mu.failures = time.Now(), 0
	}
	g.mu.failures++
	pools := make([]*Pool, 0, len(g.mu.pools))
	for _, p := range g.mu.pools {
		pools = append(pools, p)
	}
	g.mu.Unlock()
	if !wasDown {
		g.log.Warn("backend down: its clients get an error naming it until it answers again; the health check keeps trying and logs once it does",
			"addr", g.Addr(), "err", err, "health_interval", g.cfg.HealthInterval.String())
		// Idle connections to a server that went away are dead; drop them now rather than on checkout.
		for _, p := range pools {
			p.closeIdle(0)
		}
	}
}

// succeeded records a successful dial or health check.
func (g *Group) succeeded(info *mysqlwire.ServerInfo) {
	g.mu.Lock()
	wasDown := g.mu.down && g.mu.lastErr != nil
	failures, since := g.mu.failures, g.mu.downSince
	g.mu.down, g.mu.lastErr, g.mu.backoff, g.mu.failUntil = false, nil, 0, time.Time{}
	g.mu.downSince, g.mu.failures = time.Time{}, 0
	if info != nil {
		g.mu.info = info
	}
	g.mu.Unlock()
	if wasDown {
		g.log.Info("backend up again", "addr", g.Addr(), "failed_attempts", failures, "down_for", time.Since(since).Round(time.Millisecond).String())
	}
}

// monitor checks the primary every HealthInterval: COM_PING on its own connection when a monitoring user is
// configured, else a dial that reads the server's handshake.
func (g *Group) monitor() {
	defer g.wg.Done()
	var mc *Conn
	defer func() {
		if mc != nil {
			mc.Close()
		}
	}()
	var gen uint64
	check := func() {
		if mc != nil && gen != g.gen.Load() { // the group follows a new primary: check that one
			mc.Close()
			mc = nil
		}
		if mc == nil {
			gen = g.gen.Load()
			var err error
			if g.cfg.User == "" {
				mc, err = g.handshakeOnly()
			} else {
				mc, err = g.connect(context.Background(), g.cfg.User, g.cfg.Password, 0, 0, 0)
			}
			var refused *mysqlwire.Error
			if errors.As(err, &refused) {
				// The server answered: it is up, and what is wrong is the monitoring account. The health state
				// stays the server's; saying "down" here would flap with every client login that succeeds.
				g.monitorRefusedBy(refused)
				g.succeeded(nil)
				return
			}
			if err != nil {
				g.failed(err)
				return
			}
			g.monitorRefusedBy(nil)
			if g.cfg.User != "" {
				g.learnBudget(mc)
			}
			if g.cfg.User == "" {
				mc.Close()
				mc = nil
				g.succeeded(g.ServerInfo())
				return
			}
		}
		_ = mc.SetDeadline(time.Now().Add(g.cfg.ConnectTimeout))
		err := mc.WriteCommand(comPing, nil)
		if err == nil {
			_, err = mc.ReadOK()
		}
		_ = mc.SetDeadline(time.Time{})
		if err != nil {
			mc.Close()
			mc = nil
			g.failed(err)
			return
		}
		g.succeeded(mc.Info)
	}
	check()
	t := time.NewTicker(g.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			check()
		}
	}
}

// monitorRefusedBy records whether the server refused the monitoring account (nil: it logged in), and warns when
// the refusal is new: once, not at every health check.
func (g *Group) monitorRefusedBy(e *mysqlwire.Error) {
	msg := ""
	if e != nil {
		msg = e.Error()
	}
	g.mu.Lock()
	changed := g.mu.monitorRefused != msg
	g.mu.monitorRefused = msg
	g.mu.Unlock()
	switch {
	case changed && e != nil:
		g.log.Warn("the server refuses the group's account: containers and the binlog follower of this group cannot log in, and its health check only sees that the server answers; fix the group's account (user, password) in [[groups]], or the account on the server",
			"addr", g.Addr(), "user", g.cfg.User, "err", msg)
	case changed:
		g.log.Info("the server accepts the group's account again", "addr", g.Addr(), "user", g.cfg.User)
	}
}

// handshakeOnly dials and reads the handshake, for a monitor without credentials. The returned Conn is open.
func (g *Group) handshakeOnly() (*Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ConnectTimeout)
	defer cancel()
	nc, err := g.dialNet(ctx)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Now().Add(g.cfg.ConnectTimeout))
	mc := mysqlwire.NewConn(nc)
	info, _, _, err := mysqlwire.ReadServerHandshake(mc)
	if tc := g.srv.Load().tls; err == nil && tc != nil && (g.cfg.TLS != TLSPreferred || info.Capabilities&mysqlwire.ClientSSL != 0) {
		// Check what a login would: the server offers TLS if required, and its certificate verifies.
		err = g.tlsFailure(mysqlwire.ClientStartTLS(mc, info, tc))
	}
	if err != nil {
		mc.Close()
		return nil, err
	}
	g.mu.Lock()
	g.mu.info = info
	g.mu.Unlock()
	return &Conn{Conn: mc, Info: info}, nil
}

// maintain closes connections idle longer than IdleTimeout above MinIdle, and opens connections up to MinIdle in
// pools that exist while the backend is up.
func (g *Group) maintain() {
	defer g.wg.Done()
	every := min(g.cfg.IdleTimeout/2, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		g.mu.Lock()
		pools := make([]*Pool, 0, len(g.mu.pools))
		for _, p := range g.mu.pools {
			pools = append(pools, p)
		}
		down := g.mu.down
		g.mu.Unlock()
		for _, p := range pools {
			p.closeIdle(g.cfg.IdleTimeout)
			if !down {
				p.fill(g.cfg.MinIdle)
			}
		}
	}
}

const (
	comQuit            = 0x01
	comInitDB          = 0x02
	comQuery           = 0x03
	comPing            = 0x0e
	comResetConnection = 0x1f
)

// Conn is a backend connection checked out of (or headed for) a pool.
type Conn struct {
	*mysqlwire.Conn
	Info *mysqlwire.ServerInfo
	// State is the session state keyway knows the connection has (state.go): its default database, the tracked
	// variables, LAST_INSERT_ID(). DBKnown is false once a statement may have changed the database unreported (a
	// connection without session tracking: the health monitor's).
	State   State
	DBKnown bool
	// Status is the last status flags seen from the backend.
	Status uint16

	pool      *Pool
	broken    bool
	dirty     bool   // state keyway does not carry: reset before it is pooled again
	gen       uint64 // the group's gen when it was dialed: one dialed before the group followed a new primary is closed
	idleSince time.Time
	// rereadCollation: a statement changed the connection's character set without reporting its collation
	// (Settle reads it).
	rereadCollation bool
	namesCollation  bool   // and the collation read back is character_set_results' too (State.ResultsCollation)
	insertIDs       uint64 // see InsertIDs
	// stmts are the statements prepared on the connection (stmts.go); stmtUses counts their uses, for eviction.
	stmts    map[StmtKey]*Stmt
	stmtUses uint64
}

// MarkBroken says the connection is in an unknown state (mid-result, after an I/O error): Release closes it.
func (c *Conn) MarkBroken() { c.broken = true }

// MarkDirty says the connection holds session state keyway does not carry (user variables, temporary tables,
// locks, untracked variables…): Release resets it (COM_RESET_CONNECTION) before it serves another session.
func (c *Conn) MarkDirty() { c.dirty = true }

// Pool is the pool the connection was borrowed from (nil for one dialed outside pools).
func (c *Conn) Pool() *Pool { return c.pool }

// Release returns the connection to its pool with its state (recorded in State), or reset when marked dirty, or
// closed when broken or the reset fails.
func (c *Conn) Release() {
	if c.pool == nil {
		c.Close()
		return
	}
	c.pool.put(c)
}

// InitDB makes db the connection's default database (COM_INIT_DB). A refusal by the server is a *mysqlwire.Error
// and leaves the connection usable; an I/O error marks it broken.
func (c *Conn) InitDB(db string) error {
	err := c.WriteCommand(comInitDB, []byte(db))
	if err == nil {
		var st uint16
		st, err = c.ReadOK()
		if err == nil {
			c.Status, c.State.DB, c.DBKnown = st, db, true
			return nil
		}
	}
	var me *mysqlwire.Error
	if !errors.As(err, &me) {
		c.broken = true
	}
	return err
}

// Alive reports, without blocking and without consuming anything, whether an idle connection is still usable:
// the server has not closed it (wait_timeout, a restart: the socket reads end-of-file) and has sent nothing
// unasked (an error before closing, or TLS's close_notify). It looks with one non-blocking MSG_PEEK read, under
// TLS too (on the TCP socket beneath), as go-sql-driver's connCheck does. The pool checks idle connections with it
// at checkout; the SQL door checks a session's connection after it sat idle.
func (c *Conn) Alive() bool {
	readable, err := c.peek(false)
	return !readable && err == nil
}

// WaitReadable blocks until an idle connection has something to read (end-of-file, bytes or an error: each means
// the server is done with it) and reports true, or until the connection's read deadline passes (false). It
// consumes nothing. A connection that is not a socket (a test pipe) is never readable.
func (c *Conn) WaitReadable() bool {
	readable, err := c.peek(true)
	return readable && err == nil
}

// peek looks at the connection with MSG_PEEK, on the TCP socket beneath TLS too: readable when bytes already
// buffered or the socket has something to read. With wait it parks in Go's poller until then (or the read
// deadline: the error); without, it looks once. A connection that is not a socket is not readable.
func (c *Conn) peek(wait bool) (readable bool, err error) {
	if c.Buffered() > 0 {
		return true, nil
	}
	nc := c.NetConn()
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false, err
	}
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		if _, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT); !errors.Is(rerr, syscall.EAGAIN) {
			readable = true // end-of-file, bytes, or an error
			return true
		}
		return !wait // nothing yet: a look returns, a wait parks for readiness
	})
	return readable, err
}

// queryStrings runs a text query that returns one row and returns its columns' values (NULL as ""). The whole
// result is read, so the connection stays usable; an I/O or protocol error marks it broken, an ERR is a
// *mysqlwire.Error.
func (c *Conn) queryStrings(q string) ([]string, error) {
	var first []string
	n, err := c.queryRows(q, func(vals []string) {
		if first == nil {
			first = vals
		}
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("%s: no row", q)
	}
	return first, err
}

// queryRows runs a text query and calls row with each row's values (NULL as "") in turn, and returns how many rows
// there were (0 for a statement that returns none). The whole result is read; errors as queryStrings'.
func (c *Conn) queryRows(q string, row func(vals []string)) (int, error) {
	return c.queryColumns(q, nil, row)
}

// queryNamedRows runs a text query and returns its column names and every row.
func (c *Conn) queryNamedRows(q string) (names []string, rows [][]string, err error) {
	_, err = c.queryColumns(q, &names, func(vals []string) { rows = append(rows, vals) })
	return names, rows, err
}

// queryColumns is queryRows, also reading the columns' names into names when it is not nil.
func (c *Conn) queryColumns(q string, names *[]string, row func(vals []string)) (int, error) {
	p, err := c.roundTrip(q)
	if err != nil {
		return 0, err
	}
	switch p[0] {
	case mysqlwire.HeaderERR:
		return 0, mysqlwire.ParseError(p)
	case mysqlwire.HeaderOK:
		if st, ok := mysqlwire.OKStatus(p); ok {
			c.Status = st
		}
		return 0, nil
	}
	cols, defs, _ := mysqlwire.ReadColumnCount(p, c.ExtCapabilities)
	for i := 0; defs && i < int(cols); i++ {
		p, err := c.ReadPacket()
		if err != nil {
			c.broken = true
			return 0, err
		}
		if names != nil {
			*names = append(*names, columnName(p))
		}
	}
	if c.Capabilities&mysqlwire.ClientDeprecateEOF == 0 {
		if _, err := c.ReadPacket(); err != nil { // the EOF after the column definitions
			c.broken = true
			return 0, err
		}
	}
	n := 0
	for {
		p, err := c.ReadPacket()
		if err != nil {
			c.broken = true
			return n, err
		}
		if p[0] == mysqlwire.HeaderEOF && len(p) < 0xffffff {
			if st, ok := terminatorStatus(p, c.Capabilities); ok {
				c.Status = st
			}
			return n, nil
		}
		if p[0] == mysqlwire.HeaderERR {
			return n, mysqlwire.ParseError(p)
		}
		vals := make([]string, 0, cols)
		for rest := p; len(rest) > 0 && len(vals) < int(cols); {
			if rest[0] == 0xfb { // NULL
				vals, rest = append(vals, ""), rest[1:]
				continue
			}
			k, w, ok := mysqlwire.ReadLenEnc(rest)
			if !ok || w+int(k) > len(rest) {
				c.broken = true
				return n, fmt.Errorf("%s: malformed row", q)
			}
			vals, rest = append(vals, string(rest[w:w+int(k)])), rest[w+int(k):]
		}
		if len(vals) != int(cols) {
			c.broken = true
			return n, fmt.Errorf("%s: malformed row", q)
		}
		n++
		row(vals)
	}
}

// columnName is the name of a column definition packet (its fifth length-encoded string), or "" when malformed.
func columnName(p []byte) string {
	for i := 0; ; i++ {
		n, w, ok := mysqlwire.ReadLenEnc(p)
		if !ok || w+int(n) > len(p) {
			return ""
		}
		if i == 4 {
			return string(p[w : w+int(n)])
		}
		p = p[w+int(n):]
	}
}

// terminatorStatus reads the status flags of the packet that ends a result set: an EOF, or an OK with the EOF
// header under CLIENT_DEPRECATE_EOF.
func terminatorStatus(p []byte, caps uint32) (uint16, bool) {
	if caps&mysqlwire.ClientDeprecateEOF != 0 {
		return mysqlwire.OKStatus(p)
	}
	return mysqlwire.EOFStatus(p)
}

// roundTrip sends text query q and reads the first packet of its reply; an I/O error marks c broken.
func (c *Conn) roundTrip(q string) ([]byte, error) {
	err := c.WriteCommand(comQuery, []byte(q))
	p, rerr := c.ReadPacket()
	if err == nil {
		err = rerr
	}
	if err != nil {
		c.broken = true
	}
	return p, err
}

// exec runs a text statement whose reply is one OK (a SET) and records the state it reports. An ERR is a
// *mysqlwire.Error and leaves c usable; an I/O or protocol error marks c broken.
func (c *Conn) exec(q string) error {
	p, err := c.roundTrip(q)
	if err != nil {
		return err
	}
	switch {
	case p[0] == mysqlwire.HeaderERR:
		return mysqlwire.ParseError(p)
	case p[0] != mysqlwire.HeaderOK:
		c.broken = true
		return fmt.Errorf("%w: %s: reply 0x%02x is not an OK", mysqlwire.ErrMalformed, q, p[0])
	}
	ok, err := mysqlwire.ParseOK(p, c.Capabilities)
	if err != nil {
		c.broken = true
		return err
	}
	c.Status = ok.Status
	_, err = c.noteOK(&ok)
	return err
}

// Exec runs text statement q, whose reply must be one OK (BEGIN, SET), on c and records the state it reports.
// An ERR from the server is a *mysqlwire.Error and leaves c usable.
func (c *Conn) Exec(q string) error { return c.exec(q) }

// quit says goodbye to the server on c and closes it.
func quit(c *Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	_ = c.WriteCommand(comQuit, nil)
	c.Close()
}

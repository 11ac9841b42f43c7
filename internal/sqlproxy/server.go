// Package sqlproxy is keyway's SQL door: it accepts MySQL-protocol clients, authenticates them against the users in
// the config, and relays their commands to a backend group, streaming replies back packet by packet. Each statement
// goes through the plan cache (plan.go) and is counted in the digest statistics.
//
// Invariants:
//   - A client session holds no backend connection between its statements unless it is pinned (pipeline.go's
//     pinTable: a transaction, locks, temporary tables, user variables, an untracked variable…). Each statement
//     borrows a connection from its user's pool, and gives it back once its reply has been relayed to the end (the
//     next statement too, when it may read this one's diagnostics: Plan.KeepNext). A pinned session keeps its
//     connection until it unpins or ends.
//   - What a session's statements depend on travels with the session, not the connection: the default database,
//     the tracked session variables and LAST_INSERT_ID() are recorded from what the server reports (session
//     tracking, backend.State) and a borrowed connection is brought in line before the statement runs; keyway never
//     evaluates a SET. Prepared statement ids are keyway's; each statement is prepared on the connection that runs
//     it (prepared.go).
//   - The backend connection negotiated the same protocol-changing capability flags as the client (the pool key), and
//     the same MariaDB extended ones (the metadata cache, offered only once every group's server is known to have
//     it), so packets pass unchanged; only sequence ids are rewritten, from each side's own counter.
//   - A reply streams through a bounded buffer: keyway reads only each packet's leading bytes to know where the
//     reply ends (OK/ERR/EOF, column counts, SERVER_MORE_RESULTS_EXISTS) and counts rows without decoding them.
//   - A pinned session whose connection the server closes while the session waits for its client has its client
//     connection closed at once (idlewatch.go), as a direct connection would be; an unpinned one holds none.
//   - A backend connection whose state is unknown (the client vanished mid-reply, an I/O error, a transaction left
//     open by a vanished client) is discarded, never pooled. A connection a pinned session leaves is reset
//     (COM_RESET_CONNECTION) before anyone else borrows it; any other goes back with the state keyway recorded.
//   - A statement whose connection died before its reply ended is never sent again, unless it is a read without
//     side effects of an unpinned session of whose reply the client has seen nothing; otherwise the client gets
//     error 1927 (ER_CONNECTION_KILLED) saying so, and an unpinned session goes on.
//   - Every failure a client can be told about reaches it as a protocol-correct ERR; bad input from one client ends
//     only that client's session.
//   - Strangers are bounded: at most Options.MaxHandshakes connections are in their handshake at once (past that,
//     ER_CON_COUNT_ERROR and close), each for at most Options.HandshakeTimeout, and each may send only packets of
//     mysqlwire.MaxHandshakePacket bytes until it has authenticated. Memory held for unauthenticated peers is
//     therefore about MaxHandshakes × 100 KiB, whatever they send.
//   - Logins do not reveal user names: an unknown name is authenticated against a decoy account (a plugin the
//     real accounts use, a random password), so it sees the same packets and the same ERR 1045 as a known name
//     with a wrong password.
//   - With Options.RequireTLS no client gets past the handshake without TLS (ERR 1045 before any password
//     exchange).
//   - With Options.MaxAuthFailures, an address past that many failed logins per minute is refused before the
//     handshake (ER_HOST_IS_BLOCKED) until its failures age (throttle.go).
//   - Users and cache rules can be replaced while serving (SetUsers, SetCacheRules, on a reload): each is swapped
//     whole; a login authenticates against one snapshot of the users, and its session keeps the user it logged
//     in as.
//   - Connection ids in KILL are keyway's session ids (the ones clients got in the handshake), never MariaDB thread
//     ids: KILL [CONNECTION | QUERY] id reaches the backend thread of session id only when that session is logged
//     in as the same keyway user, else ER_NO_SUCH_THREAD; forms that cannot be mapped are refused (kill.go).
package sqlproxy

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/digests"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/qcache"
	"github.com/keywaydb/keyway/internal/shard"
	"github.com/keywaydb/keyway/internal/sockio"
	"github.com/keywaydb/keyway/internal/spin"
	"github.com/keywaydb/keyway/internal/stats"
	"github.com/keywaydb/keyway/internal/validity"
)

// Options configure a Server. The server fills them from the validated config; zero values take the defaults
// noted.
type Options struct {
	// Shards, when set and holding a map, routes each statement on a sharded table to the group of its shard
	// (shardroute.go); the users' group is then the map's global group. Nil: no sharding.
	Shards *shard.Holder
	// Topology is where sessions go: each user's group. It is the caller's: shared with the other components and
	// closed by the caller after Shutdown.
	Topology         *backend.Topology
	Users            []User
	TLS              *tls.Config    // offered to clients when set
	MaxConnections   int            // concurrent client connections (0 = DefaultMaxConnections)
	AllowLocalInfile bool           // relay LOAD DATA LOCAL INFILE (false: refused)
	Plans            *PlanCache     // nil = a private cache of DefaultPlanCapacity
	Digests          *digests.Table // nil = no digest statistics
	Metrics          *stats.Metrics // nil = no metrics
	Logger           *slog.Logger
	// OnClientsGrown, when set, is called with a new high of connected clients, rounded up to a multiple of
	// ClientsStep, each time the clients first exceed the last high, one call at a time and in rising order: a
	// client holds memory for as long as it is connected (its connection's buffers, its goroutine, its session),
	// and the caller gives Go's heap room for it.
	OnClientsGrown func(clients int64)
	// Validity, when set, is the registry of cached table data shared with the other doors: a statement first
	// settles the tables it names (write-behind queues write what keyway acknowledged to them, so the statement
	// sees and acts after those writes; an error is the client's reply and the statement is not sent), and the
	// tables it writes are invalidated after the backend acknowledged it and before the client sees the reply,
	// so no cache outlives a write made through the door.
	Validity *validity.Registry
	// Cache, when set, answers cacheable reads (Plan.Cacheable) of unpinned sessions from the result cache and
	// fills it from their replies (cache.go). It must share Validity.
	Cache *qcache.Cache
	// CacheRules make the cache take reads that are not point selects (see CacheRule).
	CacheRules []CacheRule
	// TTLOnly names the groups whose tables no binlog follower watches (invalidate = "ttl"): a reply read from one
	// of them is cached for at most the given life when its statement (hint or rule) names none, since writes made
	// directly in MySQL never reach it. keyway's own writes still invalidate it.
	TTLOnly map[string]time.Duration
	// CacheReport, when set, gives SHOW KEYWAY CACHE its rows (name, value): the caches' and followers' figures.
	CacheReport func() [][2]string

	// MaxHandshakes bounds the connections still logging in (handshake and authentication); past it a new
	// connection gets ER_CON_COUNT_ERROR and is closed. 0 = DefaultMaxHandshakes.
	MaxHandshakes int
	// HandshakeTimeout bounds a client's handshake and authentication, as MariaDB's connect_timeout does, so a
	// silent client cannot hold a handshake slot. 0 = DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// RequireTLS refuses clients that do not switch to TLS in the handshake (ERR 1045). It needs TLS.
	RequireTLS bool
	// Spin is how long, at first, a session looks for its client's next command, or its backend's reply, without
	// waiting, while its client is alone (no other session ran a statement lately: spin.Gate; Linux, no TLS).
	// 0: never.
	Spin time.Duration
	// MaxAuthFailures blocks a client address that failed this many logins within a minute: its new connections
	// get ER_HOST_IS_BLOCKED until the failures age (throttle.go). 0 = unlimited.
	MaxAuthFailures int
}

// User is an account clients log in to keyway with.
type User struct {
	Name, Password string
	// AuthPlugin is mysqlwire.NativePassword or mysqlwire.CachingSha2Password; "" follows the user's backend, as a
	// client connected to it directly would find (see backendPlugin).
	AuthPlugin string
	// BackendUser and BackendPassword are the account keyway uses on the backend ("" = Name, Password).
	BackendUser, BackendPassword string
	Group                        string // the backend group its sessions go to ("" = the topology's default)
}

// Defaults of zero Options fields; the config's defaults are these too.
const (
	DefaultPlanCapacity   = 10000
	DefaultMaxConnections = 1024
	// DefaultHandshakeTimeout bounds a client's handshake and authentication (MariaDB's connect_timeout default).
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxHandshakes bounds the connections logging in at once: with mysqlwire.MaxHandshakePacket, strangers
	// can make keyway hold at most about 256 × 100 KiB.
	DefaultMaxHandshakes = 256
	// backendCheckoutTimeout bounds the wait for a backend connection when a client logs in.
	backendCheckoutTimeout = 10 * time.Second
	// defaultVersion is announced until the backend's own version is known.
	defaultVersion = "8.0.36-keyway"
	// offeredCaps is what keyway can relay; masked by what the backend offers.
	offeredCaps = mysqlwire.BaseCaps | mysqlwire.ClientConnectWithDB | mysqlwire.ClientConnectAttrs | mysqlwire.ProtocolCaps
)

// user is a [[sql.users]] entry with its defaults filled in.
type user struct {
	acct            mysqlwire.Account // Plugin "" = backendPlugin(group), decided at each login
	backendUser     string
	backendPassword string
	group           *backend.Group
	// gate is the group's freshness gate (whether the result cache may answer the user's sessions), found once
	// here: the server made every group's gate before the door opened. nil (no registry, or a test's that has no
	// gates) serves.
	gate *validity.Gate
}

// Server is the SQL door.
type Server struct {
	opts  Options
	log   *slog.Logger
	plans *PlanCache
	// regexMatches memoizes regex cache rules per digest (regexKey → bool); regexCount bounds it.
	regexMatches sync.Map
	regexCount   atomic.Int64
	// accounts are the users and their decoy plugins; SetUsers replaces them whole, so a login sees one table.
	accounts atomic.Pointer[accounts]
	rules    atomic.Pointer[[]CacheRule] // Options.CacheRules; SetCacheRules replaces them
	groups   []*backend.Group
	tls      *tls.Config

	pinned pinCounts // pinned sessions by group and reason, for /metrics
	// spinGate admits sessions' spins (Options.Spin): while one session alone runs statements, one spin at a time.
	spinGate spin.Gate

	maxConns int64
	conns    atomic.Int64
	// clientsHigh is the last high of conns passed to Options.OnClientsGrown; clientsMu orders those calls.
	clientsHigh atomic.Int64
	clientsMu   sync.Mutex
	// maxHandshakes bounds handshakes, the connections not yet authenticated (session.run).
	maxHandshakes    int64
	handshakes       atomic.Int64
	handshakeTimeout time.Duration
	connID           atomic.Uint32

	throttle *authThrottle
	loginLog *authThrottle // bounds the failed-login lines per address (throttle.go)

	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
	rsaErr  error

	// cachingSha2FullAuth: always run caching_sha2_password full authentication (tests).
	cachingSha2FullAuth bool

	mu struct {
		sync.Mutex
		listeners map[net.Listener]struct{}
		sessions  map[*session]struct{}
		byID      map[uint32]*session // the same sessions by keyway connection id, for KILL
		shutdown  bool
		// idleStop ends watchIdle (idlewatch.go), started by the first Serve; nil until then.
		idleStop chan struct{}
	}
	wg sync.WaitGroup // sessions, and watchIdle

	// handoff passes an accepted session to a session worker waiting for one; workersStop, closed by Shutdown,
	// ends the waiting workers (see sessionWorker).
	handoff     chan *session
	workersStop chan struct{}
}

// sessionWorkerIdle is how long a goroutine that ran a session waits for the next one before it ends.
const sessionWorkerIdle = 10 * time.Second

// New builds the user table. It fails only on Options that name what does not exist: no backend group, a user's
// unknown group or auth plugin.
func New(o Options) (*Server, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{opts: o, log: log, plans: o.Plans, maxConns: int64(o.MaxConnections), tls: o.TLS}
	if s.plans == nil {
		s.plans = NewPlanCache(DefaultPlanCapacity)
	}
	if s.maxConns <= 0 {
		s.maxConns = DefaultMaxConnections
	}
	s.maxHandshakes = int64(o.MaxHandshakes)
	if s.maxHandshakes <= 0 {
		s.maxHandshakes = DefaultMaxHandshakes
	}
	s.throttle = newAuthThrottle(o.MaxAuthFailures)
	s.loginLog = newAuthThrottle(loginLogBurst)
	s.handshakeTimeout = o.HandshakeTimeout
	if s.handshakeTimeout <= 0 {
		s.handshakeTimeout = DefaultHandshakeTimeout
	}
	s.mu.listeners = make(map[net.Listener]struct{})
	s.mu.sessions = make(map[*session]struct{})
	s.mu.byID = make(map[uint32]*session)
	s.handoff, s.workersStop = make(chan *session), make(chan struct{})
	if o.Topology == nil {
		return nil, fmt.Errorf("sql: %w", backend.ErrNoGroups)
	}
	if _, err := o.Topology.Default(); err != nil {
		return nil, fmt.Errorf("sql: the SQL door needs a backend group to relay to: %w", err)
	}
	if o.RequireTLS && s.tls == nil {
		return nil, errors.New("sql.require_tls = true needs sql.tls_cert and sql.tls_key (PEM files): keyway cannot require TLS it does not offer")
	}
	s.groups = o.Topology.Groups()
	if err := s.SetUsers(o.Users); err != nil {
		return nil, err
	}
	s.SetCacheRules(o.CacheRules)
	if o.Metrics != nil {
		o.Metrics.SetPoolStatsFunc(s.poolStats)
		o.Metrics.SetPinnedFunc(s.pinned.stats)
	}
	return s, nil
}

// accounts are the users clients log in as.
type accounts struct {
	users map[string]*user
	// decoyPlugins are the plugins the users with an explicit one have, and followers the groups of the users
	// without: an unknown user name looks like an account of one of them (decoys).
	decoyPlugins []string
	followers    []*backend.Group
}

// SetUsers replaces the users new logins are checked against (a configuration reload). Sessions already logged in
// keep their user. On an error (an unknown auth plugin or group) nothing changes.
func (s *Server) SetUsers(users []User) error {
	def, err := s.opts.Topology.Default()
	if err != nil {
		return fmt.Errorf("sql: the SQL door needs a backend group to relay to: %w", err)
	}
	a := &accounts{users: make(map[string]*user, len(users))}
	for _, u := range users {
		e := &user{
			acct:            mysqlwire.Account{User: u.Name, Password: u.Password, Plugin: u.AuthPlugin},
			backendUser:     cmp.Or(u.BackendUser, u.Name),
			backendPassword: cmp.Or(u.BackendPassword, u.Password),
			group:           def,
		}
		if p := e.acct.Plugin; p != "" && p != mysqlwire.NativePassword && p != mysqlwire.CachingSha2Password {
			return fmt.Errorf("sql.users %q: auth_plugin = %q: want \"mysql_native_password\" or \"caching_sha2_password\"", u.Name, u.AuthPlugin)
		}
		if u.Group != "" {
			if e.group = s.opts.Topology.Group(u.Group); e.group == nil {
				return fmt.Errorf("sql.users %q: group = %q: no [[groups]] has that name", u.Name, u.Group)
			}
		}
		if s.opts.Validity != nil {
			e.gate = s.opts.Validity.LookupGate(e.group.Name())
		}
		a.users[u.Name] = e
		switch {
		case e.acct.Plugin == "":
			if !slices.Contains(a.followers, e.group) {
				a.followers = append(a.followers, e.group)
			}
		case !slices.Contains(a.decoyPlugins, e.acct.Plugin):
			a.decoyPlugins = append(a.decoyPlugins, e.acct.Plugin)
		}
	}
	slices.Sort(a.decoyPlugins)
	s.accounts.Store(a)
	return nil
}

// SetCacheRules replaces the cache rules (a configuration reload); statements planned from now on follow them.
func (s *Server) SetCacheRules(rules []CacheRule) {
	rules = slices.Clone(rules)
	s.rules.Store(&rules)
	s.regexMatches.Clear() // verdicts of the old rules' regexps; they are keyed by regexp, so this only frees memory
	s.regexCount.Store(0)
}

// PoolStats returns the state of every backend pool.
func (s *Server) PoolStats() []backend.PoolStats {
	return s.opts.Topology.Stats()
}

func (s *Server) poolStats() []stats.PoolStat {
	ps := s.PoolStats()
	out := make([]stats.PoolStat, len(ps))
	for i, p := range ps {
		out[i] = stats.PoolStat{Group: p.Group, Address: p.Address, User: p.User, Open: p.Open, Idle: p.Idle,
			InUse: p.InUse, Waits: p.Waits, Errors: p.Errors, Waiting: p.Waiting, Borrows: p.Gets, Fixups: p.Fixups,
			WaitSeconds: p.WaitTime.Seconds()}
	}
	return out
}

// Serve accepts clients on ln until Shutdown (then it returns nil) or an accept error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.mu.shutdown {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.mu.listeners[ln] = struct{}{}
	if s.mu.idleStop == nil {
		s.mu.idleStop = make(chan struct{})
		s.wg.Add(1)
		go func(stop <-chan struct{}) {
			defer s.wg.Done()
			s.watchIdle(stop)
		}(s.mu.idleStop)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.mu.listeners, ln)
		s.mu.Unlock()
	}()
	err := sockio.AcceptLoop{
		Closed: func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.mu.shutdown
		},
		Retry: func(err error) bool {
			return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED)
		},
	}.Run(ln, func(nc net.Conn) bool {
		sess := &session{s: s, nc: nc}
		s.mu.Lock()
		if s.mu.shutdown {
			s.mu.Unlock()
			nc.Close()
			return false
		}
		for sess.id == 0 { // unique among live sessions even when the 32-bit counter wraps: KILL names one session
			if id := s.connID.Add(1); s.mu.byID[id] == nil {
				sess.id = id
			}
		}
		s.mu.sessions[sess] = struct{}{}
		s.mu.byID[sess.id] = sess
		s.wg.Add(1)
		s.mu.Unlock()
		select {
		case s.handoff <- sess: // a worker was waiting
		default:
			go s.sessionWorker(sess)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("sql: accept on %s: %w", ln.Addr(), err)
	}
	return nil
}

// sessionWorker runs sess, then waits up to sessionWorkerIdle for another session to run, as MariaDB's thread
// cache keeps a thread: a client that connects gets a goroutine whose stack has already grown to what a login
// needs. Growing a new goroutine's stack (the SHA-1 of a password check takes it past the first 8 KiB) was 6% of
// keyway's CPU for clients that connect, run a statement and close.
func (s *Server) sessionWorker(sess *session) {
	idle := time.NewTimer(sessionWorkerIdle)
	defer idle.Stop()
	for {
		sess.run()
		s.mu.Lock()
		delete(s.mu.sessions, sess)
		delete(s.mu.byID, sess.id)
		s.mu.Unlock()
		s.wg.Done()
		idle.Reset(sessionWorkerIdle)
		select {
		case sess = <-s.handoff:
		case <-idle.C:
			return
		case <-s.workersStop:
			return
		}
	}
}

// Shutdown stops accepting, lets every session finish the command it is running, then closes the sessions (the
// backend topology is the caller's to close). When ctx ends first, remaining sessions are cut off (their backend connections discarded).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.mu.shutdown {
		close(s.workersStop)
	}
	s.mu.shutdown = true
	for ln := range s.mu.listeners {
		ln.Close()
	}
	if s.mu.idleStop != nil {
		close(s.mu.idleStop)
		s.mu.idleStop = nil
	}
	for sess := range s.mu.sessions {
		// A session waiting for its next command wakes up and ends; one running a command ends after it.
		sess.interrupt()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		s.mu.Lock()
		for sess := range s.mu.sessions {
			sess.nc.Close()
		}
		s.mu.Unlock()
		<-done
	}
	return err
}

// session returns the live session with keyway connection id id, or nil.
func (s *Server) session(id uint64) *session {
	if id > 1<<32-1 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.byID[uint32(id)]
}

func (s *Server) shuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.shutdown
}

// lookup finds a keyway user for the handshake, with the plugin it logs in with now.
func (a *accounts) lookup(name string) (mysqlwire.Account, bool) {
	u, ok := a.users[name]
	if !ok {
		return mysqlwire.Account{}, false
	}
	acct := u.acct
	if acct.Plugin == "" {
		acct.Plugin = backendPlugin(u.group)
	}
	return acct, true
}

// decoys are the plugins the users log in with now: an unknown name gets one of them.
func (a *accounts) decoys() []string {
	if len(a.followers) == 0 {
		return a.decoyPlugins
	}
	out := slices.Clone(a.decoyPlugins)
	for _, g := range a.followers {
		if p := backendPlugin(g); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// backendPlugin is the auth plugin of a user configured without one: the plugin a client connected to g's server
// directly would meet by default. MariaDB's is mysql_native_password (it has no caching_sha2_password on the
// server side, and libmariadb, the client library of the mariadb CLI, sysbench, Connector/C and the bindings
// built on it, loads caching_sha2_password as an external plugin whose loading races between threads connecting
// at once); MySQL 8.0 and later default to caching_sha2_password.
// Until g's server has been reached once keyway does not know which it is, and it answers mysql_native_password,
// the plugin its greeting names (so no client switches plugins); such a login cannot reach the backend anyway,
// and the next one after the server answered uses the server's default.
func backendPlugin(g *backend.Group) string {
	return serverPlugin(g.ServerInfo())
}

// serverPlugin is the default auth plugin of the server whose handshake was info (nil: not known yet).
func serverPlugin(info *mysqlwire.ServerInfo) string {
	if info == nil || strings.Contains(info.Version, "MariaDB") {
		return mysqlwire.NativePassword
	}
	if major, _, _ := strings.Cut(info.Version, "."); len(major) >= 2 || major >= "8" {
		return mysqlwire.CachingSha2Password // MySQL 8.0 and later (10 and on: two digits)
	}
	return mysqlwire.NativePassword // MySQL 5.x
}

// rsa returns keyway's RSA key for caching_sha2_password full authentication without TLS, generated on first use.
func (s *Server) rsa() (*rsa.PrivateKey, error) {
	s.rsaOnce.Do(func() {
		s.rsaKey, s.rsaErr = rsa.GenerateKey(rand.Reader, 2048)
	})
	return s.rsaKey, s.rsaErr
}

// serverConfig is the handshake offer for a new client, authenticating against a (the caller's snapshot of
// s.accounts, so that the user it then looks up is the one that logged in).
func (s *Server) serverConfig(remote string, a *accounts) *mysqlwire.ServerConfig {
	// The name the client gave and whether it has an account, for the log of a failed login.
	var user string
	known := false
	version := defaultVersion
	caps := uint32(offeredCaps)
	ext := uint32(mysqlwire.ExtProtocolCaps)
	// Offer what every backend group can also do, so the backend connection negotiates the same protocol whichever
	// group the user (not known yet) belongs to. The version shown is the default group's. MariaDB's extended
	// capabilities are offered only once every group's server is known to have them.
	for i, g := range s.groups {
		if info := g.ServerInfo(); info != nil {
			if i == 0 {
				version = info.Version
			}
			caps &= info.Capabilities | mysqlwire.ClientConnectAttrs
			ext &= info.ExtCapabilities
		} else {
			ext = 0
		}
	}
	return &mysqlwire.ServerConfig{
		Version:         version,
		Capabilities:    caps,
		ExtCapabilities: ext,
		Status:          mysqlwire.StatusAutocommit,
		TLS:             s.tls,
		DefaultPlugin:   mysqlwire.NativePassword,
		Lookup: func(name string) (mysqlwire.Account, bool) {
			acct, ok := a.lookup(name)
			user, known = name, ok
			return acct, ok
		},
		RSAKey:              s.rsa,
		CachingSha2FullAuth: s.cachingSha2FullAuth,
		RemoteHost:          remote,
		// A failed login is logged and counts against its address before the client can try again (throttle.go).
		OnDenied: func() {
			reason := "wrong password"
			if !known {
				reason = "no such user"
			}
			s.loginDenied(remote, user, reason, true)
		},
		DecoyPlugins: a.decoys(),
		RequireTLS:   s.opts.RequireTLS,
	}
}

// shardMap is the shard map statements are routed by now, or nil.
func (s *Server) shardMap() *shard.Map {
	if s.opts.Shards == nil {
		return nil
	}
	return s.opts.Shards.Load()
}

// ClientsStep is the rounding of the highs Options.OnClientsGrown is told: a call per so many more clients.
const ClientsStep = 128

// clientsGrew raises the high of connected clients to n rounded up to ClientsStep, if n is above it, and tells
// Options.OnClientsGrown.
func (s *Server) clientsGrew(n int64) {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	if n <= s.clientsHigh.Load() {
		return
	}
	high := (n + ClientsStep - 1) / ClientsStep * ClientsStep
	s.clientsHigh.Store(high)
	if f := s.opts.OnClientsGrown; f != nil {
		f(high)
	}
}

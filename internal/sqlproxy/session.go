package sqlproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/keywaydb/keyway/internal/backend"
	"github.com/keywaydb/keyway/internal/digests"
	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/sockio"
	"github.com/keywaydb/keyway/internal/spin"
	"github.com/keywaydb/keyway/internal/validity"
)

// Commands (client → server), as numbered by the protocol.
const (
	comQuit             = 0x01
	comInitDB           = 0x02
	comQuery            = 0x03
	comFieldList        = 0x04
	comStatistics       = 0x09
	comPing             = 0x0e
	comChangeUser       = 0x11
	comStmtPrepare      = 0x16
	comStmtExecute      = 0x17
	comStmtSendLongData = 0x18
	comStmtClose        = 0x19
	comStmtReset        = 0x1a
	comSetOption        = 0x1b
	comStmtFetch        = 0x1c
	comResetConnection  = 0x1f
)

// session is one client connection. Between its statements it holds no backend connection unless it is pinned
// (pipeline.go): each statement borrows one from pool (lease) and gives it back when its reply has been relayed
// (release, after the command).
type session struct {
	s  *Server
	nc net.Conn
	id uint32

	c    *mysqlwire.Conn // client side (keyway is the server)
	hs   *mysqlwire.Handshake
	user *user
	// accounts is the user table the session last authenticated against (login, COM_CHANGE_USER).
	accounts *accounts
	remote   string
	pool     *backend.Pool // where the session's statements borrow their connection
	// shard, during a statement the shard router sent elsewhere (shardroute.go), is the group that runs it: the
	// lease borrows from its pool instead of pool's.
	shard    *backend.Group
	routeBuf []byte // routeParams' buffer
	// pendingBegin is a transaction start the shard router answered itself (shardroute.go, deferBegin): it runs
	// first on the connection the next statement borrows, so the transaction is on the shard that statement needs.
	pendingBegin string
	be           *backend.Conn        // the connection held now: during a command, and between commands while pinned
	db           string               // current default database as far as keyway knows (state.DB, kept apart for speed)
	stmts        map[uint32]*prepared // keyway's statement id → the client's prepared statement (prepared.go)
	nextStmt     uint32               // the last statement id given
	exec         execState            // the statement of the execute being relayed (prepared.go)
	keyBuf       []byte               // the result cache's key of the statement being run (cacheKey)
	replyBuf     []byte               // what a result cache hit is copied to before it is replayed (replayCached)
	beUsed       time.Time            // when be was checked out or last sent a command (see freshBackend)
	// state is the session state a connection must have to run the session's next statement (backend.State): the
	// state of the connection its last statement ran on, as the server reported it. status is the status flags of
	// the last reply (a transaction open, autocommit).
	state  backend.State
	status uint16
	// insertIDs is be.InsertIDs() when the session borrowed be: whether its statements set LAST_INSERT_ID().
	insertIDs uint64
	// relayedPkts counts the packets of the reply being relayed that went the client's way; retried is set once a
	// statement ran again on another connection after its first one failed before it replied (exchange).
	relayedPkts int
	retried     bool
	// clientSpin and backendSpin are the session's spins (Options.Spin) for its client's next command and for its
	// backend's replies; backendSpin is lent to each connection the session borrows.
	clientSpin, backendSpin sockio.Spinner
	// holdNext keeps the connection for the session's next statement: the previous statement's diagnostics
	// (warnings, ROW_COUNT(), FOUND_ROWS()) are on it (see Plan.KeepNext).
	holdNext bool

	deprecateEOF bool
	// warned is set when the last reply relay.results passed ended with a warning count above zero: a reply the
	// result cache must not keep, since a replay cannot give SHOW WARNINGS what the backend said.
	warned bool
	// dst is where relayed replies go: the client, or nil while draining a reply the client must not see.
	dst *mysqlwire.Conn
	// head receives the leading bytes of each relayed packet.
	head [64]byte
	// quit is set when the client ended the session cleanly (COM_QUIT).
	quit bool

	// txTables are the tables written in the open transaction: invalidated
	// again when it ends, since a reader may have cached the old rows between
	// the write and the COMMIT.
	txTables []validity.TableID
	// txSeen: a statement opened a transaction on this session once. It stays set: after SET autocommit=0
	// every COMMIT starts the next transaction implicitly, so the tables written are remembered from then on.
	txSeen bool
	pin    pinState // see pipeline.go
	// published are the pins the session last counted in the server's pinned-session counts (publishPins).
	published struct {
		set   PinSet
		group string
	}
	// watch closes the client's connection when the server closes a stateful session's backend connection while
	// the session waits for its client (idlewatch.go).
	watch idleWatch

	// What other sessions' KILL statements read (kill.go), written by this session's goroutine under killMu:
	// killUser is the keyway user once authenticated, killBE the backend connection checked out (nil when none).
	// A KILL aimed at this session holds killMu while it runs, so killBE cannot be released meanwhile.
	killMu   sync.Mutex
	killUser string
	killBE   *backend.Conn
	// interrupted is set by interrupt: the session ends at its next command.
	interrupted atomic.Bool
}

// interrupt ends the session at its next read of its client (KILL CONNECTION, Shutdown); a command in flight
// finishes first. Safe from any goroutine. The read deadline wakes a session waiting in the poller; the flag stops
// one whose read ran without it (a spin reads with raw calls, which no deadline reaches) from running what it read.
func (ss *session) interrupt() {
	ss.interrupted.Store(true)
	ss.clientSpin.Stop()
	_ = ss.nc.SetReadDeadline(time.Now())
}

// errSessionEnd ends the command loop after the client has been told why (or has gone).
var errSessionEnd = errors.New("session ends")

func (ss *session) run() {
	s := ss.s
	defer func() {
		if ss.c != nil {
			ss.c.Recycle() // closes nc, and keeps the buffers for the next client
		} else {
			ss.nc.Close()
		}
	}()
	if m := s.opts.Metrics; m != nil {
		m.SQLConnectionOpened()
		defer m.SQLConnectionClosed()
	}
	ss.c = mysqlwire.NewConn(ss.nc)
	ss.dst = ss.c
	if s.opts.Spin > 0 {
		// Field by field, not whole Spinners: the session is registered already, so Shutdown may have stopped its
		// client spinner (interrupt), and writing the whole struct would race with that and undo it.
		ss.clientSpin.Budget, ss.clientSpin.Gate, ss.clientSpin.Who = spin.Budget{Base: s.opts.Spin}, &s.spinGate, uint64(ss.id)
		ss.backendSpin.Budget, ss.backendSpin.Gate, ss.backendSpin.Who = spin.Budget{Base: s.opts.Spin}, &s.spinGate, uint64(ss.id)
		ss.backendSpin.MaxBusy = 1
		ss.c.SetSpinner(&ss.clientSpin)
	}
	ss.remote = remoteHost(ss.nc)
	if n := s.conns.Add(1); n > s.maxConns {
		s.conns.Add(-1)
		// Before the handshake, as MySQL does: the client reads an ERR instead.
		_ = ss.c.WriteError(mysqlwire.NewError(mysqlwire.ERConCount, "08004",
			"Too many connections (keyway sql.max_connections = %d)", s.maxConns))
		return
	} else if n > s.clientsHigh.Load() {
		s.clientsGrew(n)
	}
	defer s.conns.Add(-1)
	defer ss.publishPins(true)
	defer ss.releaseBackend()
	defer func() {
		// A bug met by one statement costs its session, not the server; the
		// backend connection is in an unknown state, so it is not reused.
		if r := recover(); r != nil {
			s.log.Error("sql: a command crashed its session; closing it", "remote", ss.remote, "panic", r, "stack", string(debug.Stack()))
			if ss.be != nil {
				ss.be.MarkBroken()
			}
		}
	}()

	hs, err := ss.login()
	if err != nil {
		s.log.Debug("sql: handshake failed", "remote", ss.nc.RemoteAddr().String(), "err", err)
		return
	}
	ss.hs = hs
	ss.user = ss.accounts.users[hs.User]
	ss.deprecateEOF = hs.Capabilities&mysqlwire.ClientDeprecateEOF != 0
	if err := ss.attach(hs.DB); err != nil {
		return
	}
	// The login's OK goes out with the read of the client's first command (FlushBeforeReply): the client sends
	// nothing before it has the OK, and a client that connects only to disconnect (PHP) saves keyway a read.
	if err := ss.c.Finish(mysqlwire.AppendOK(ss.c.Begin(), ss.c.Capabilities, 0, 0, ss.status, 0)); err != nil {
		return
	}
	if err := ss.c.FlushBeforeReply(); err != nil {
		return
	}
	_ = ss.nc.SetDeadline(time.Time{})
	if s.shuttingDown() { // Shutdown's read deadline may have been cleared just above
		return
	}
	ss.setKillUser() // only now: a KILL CONNECTION's read deadline must not be cleared just above
	for {
		if err := ss.command(); err != nil {
			if !errors.Is(err, errSessionEnd) && !isClosed(err) {
				s.log.Debug("sql: session ends", "id", ss.id, "user", hs.User, "err", err)
			}
			return
		}
	}
}

// login runs the handshake and authentication within the pre-auth bounds (see the package invariants): a blocked
// address or a full set of handshake slots is refused before the greeting, and the handshake has a deadline. On
// failure the client has been told why where the protocol allows.
func (ss *session) login() (*mysqlwire.Handshake, error) {
	s := ss.s
	if s.throttle.blocked(ss.remote) {
		// Before the handshake, as MariaDB refuses a blocked host: no slot, no authentication.
		_ = ss.c.WriteError(s.throttle.errHostBlocked(ss.remote))
		return nil, errSessionEnd
	}
	n := s.handshakes.Add(1)
	defer s.handshakes.Add(-1) // authenticated or refused: no longer a stranger holding a slot
	if n > s.maxHandshakes {
		_ = ss.c.WriteError(mysqlwire.NewError(mysqlwire.ERConCount, "08004",
			"Too many connections (keyway: %d clients are already logging in)", s.maxHandshakes))
		return nil, errSessionEnd
	}
	_ = ss.nc.SetDeadline(time.Now().Add(s.handshakeTimeout))
	ss.accounts = s.accounts.Load()
	cfg := s.serverConfig(ss.remote, ss.accounts)
	cfg.ConnectionID = ss.id
	hs, err := mysqlwire.ServerHandshake(ss.c, cfg)
	if errors.Is(err, mysqlwire.ErrAuth) && cfg.RequireTLS && !ss.c.TLS {
		// Refused before any password exchange, so cfg.OnDenied did not log it; the message names the user.
		s.loginDenied(ss.remote, "", "no TLS, and sql.require_tls is set: "+err.Error(), false)
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		// MariaDB's connect_timeout: tell the client why before closing.
		_ = ss.nc.SetDeadline(time.Now().Add(time.Second))
		ss.sendErr(mysqlwire.NewError(mysqlwire.ERNetReadInterrupted, "08S01",
			"Got timeout reading communication packets (keyway allows %v to log in)", s.handshakeTimeout))
	}
	return hs, err
}

// setKillUser publishes the session's keyway user to other sessions' KILL (kill.go).
func (ss *session) setKillUser() {
	ss.killMu.Lock()
	ss.killUser = ss.hs.User
	ss.killMu.Unlock()
}

// attach sets the session up for its user: its pool and the state of a new connection there, with db as the
// default database. The login borrows a connection (checking that the backend is up, and db exists, as a direct
// login would) and gives it back at once; it costs no round trip when an idle connection already has db. On failure
// the client has been sent an ERR and the returned error ends the session.
func (ss *session) attach(db string) error {
	u := ss.user
	key := backend.PoolKey{User: u.backendUser, Caps: ss.hs.Capabilities, ExtCaps: ss.hs.ExtCapabilities, Collation: ss.hs.Collation}
	ss.pool = u.group.Pool(key, u.backendPassword)
	ctx, cancel := context.WithTimeout(context.Background(), backendCheckoutTimeout)
	defer cancel()
	be, state, err := ss.pool.Login(ctx, db)
	_, down := errors.AsType[*backend.UnavailableError](err)
	_, fenced := errors.AsType[*backend.FencedError](err)
	if (down || fenced) && u.group.ReadsReplicas() {
		// The primary is down, or fenced: a replica checks the login, so the session can still read (its writes
		// get the primary's error).
		if m := u.group.ReadMember(validity.Position{}); m != u.group {
			be, state, err = m.Pool(key, u.backendPassword).Login(ctx, db)
		}
	}
	if err != nil {
		ss.sendErr(clientError(u.group, err))
		return errSessionEnd
	}
	ss.state, ss.db, ss.status = state, db, be.Status
	ss.holdNext = false
	be.Release()
	return nil
}

// lease gives the session a backend connection for the statement of plan (nil for commands that are not
// statements) in ss.be: the one it holds (pinned, or kept for this statement), else one borrowed from its pool and
// brought in line with the session's state. A failure the client must hear of is returned as an ERR for it (the
// session goes on); the error ends the session.
func (ss *session) lease(plan *Plan) (*mysqlwire.Error, error) {
	if ss.be != nil && ss.be.Pool() != ss.pool && plan != nil && !plan.ReadsDiagnostics && !ss.mayReadReplica(plan) {
		// Kept on a replica for the diagnostics of the read that ran there (holdNext): anything but another such
		// read, or those diagnostics, runs on the primary.
		ss.holdNext = false
		ss.release()
	}
	if ss.be != nil && ss.s.shardMap() != nil && plan != nil && len(plan.Tables) > 0 {
		if want := cmp.Or(ss.shard, ss.user.group); ss.be.Pool().Group() != want {
			if pinned, why := ss.pinned(); pinned && !ss.holdNext {
				return shardRefusal("the session is tied to group %s (%s) and this statement runs on group %s: a transaction or pinned session stays on one shard",
					ss.be.Pool().Group().Name(), why, want.Name()), nil
			}
			ss.holdNext = false
			ss.release()
		}
	}
	if ss.be != nil {
		if err := ss.be.Fenced(); err != nil {
			return clientError(ss.user.group, err), nil
		}
		if ss.status&mysqlwire.StatusInTrans == 0 {
			// A switchover holds statements at transaction boundaries; one inside a transaction goes on to end it.
			_ = ss.be.WaitHold(context.Background())
		}
		if ss.be.Stale() { // the group followed a new primary since the session took this connection
			if pinned, why := ss.pinned(); pinned {
				ss.sendErr(mysqlwire.NewError(mysqlwire.ERConnectionKilled, "70100",
					"keyway: backend group %s has a new primary (%s); the session's state (%s) was on the former one: reconnect",
					ss.user.group.Name(), ss.user.group.Addr(), cmp.Or(why, "prepared statements")))
				return nil, errSessionEnd
			}
			ss.holdNext = false
			ss.release() // closed: its server is not the group's primary any more
		}
	}
	if ss.be != nil {
		if usable, err := ss.freshBackend(time.Now()); usable || err != nil {
			return nil, err
		}
	}
	var needs backend.Needs
	if plan != nil {
		needs = backend.Needs{LastInsertID: plan.ReadsLastInsertID && ss.state.LastInsertID != 0, FreshDiagnostics: plan.ReadsDiagnostics}
	}
	// No deadline of its own: the pool bounds a wait by pool_wait and a dial by connect_timeout.
	pool, primary, wait := ss.leasePool(plan) // a replica's, for a read one may run (replicas.go)
	be, err := pool.Lease(context.Background(), &ss.state, needs)
	if !wait.IsZero() {
		g := ss.runGroup()
		if err == nil {
			be = ss.leaseWaited(g, be, wait)
		} else {
			g.DoneWaiting()
		}
	}
	if pool != primary && (err != nil || be == nil) {
		be, err = primary.Lease(context.Background(), &ss.state, needs) // the replica failed: the primary has it all
	}
	if err == nil && ss.pendingBegin != "" {
		if err = be.Exec(ss.pendingBegin); err != nil {
			be.Release()
			ss.status &^= mysqlwire.StatusInTrans // the transaction the client was told of did not start
		}
		ss.pendingBegin = ""
	}
	if err != nil {
		g := ss.runGroup()
		return clientError(g, err), nil
	}
	ss.be, ss.insertIDs = be, be.InsertIDs()
	if ss.s.opts.Spin > 0 {
		be.SetSpinner(&ss.backendSpin)
	}
	ss.beUsed = time.Now() // checked out alive (the pool looks at idle connections before it hands them out)
	ss.killMu.Lock()
	ss.killBE = be
	ss.killMu.Unlock()
	return nil, nil
}

// release ends the command's lease: the session gives its connection back, with the state it recorded, unless it
// is pinned or keeps it for its next statement. Called after every command.
func (ss *session) release() {
	be := ss.be
	if be == nil {
		return
	}
	ss.status = be.Status
	if ss.holdNext {
		return
	}
	if pinned, _ := ss.pinned(); pinned {
		return
	}
	if err := be.Settle(); err != nil {
		ss.s.log.Debug("sql: reading a backend connection's state failed; closing it", "session", ss.id, "err", err)
	}
	lastID := ss.state.LastInsertID
	if be.InsertIDs() != ss.insertIDs { // a statement of this lease set it
		lastID = be.State.LastInsertID
	}
	ss.state = be.State
	ss.state.LastInsertID = lastID
	ss.detach()
	be.Release()
}

// detach forgets the connection the session holds, once no KILL aimed at it runs (see kill.go).
func (ss *session) detach() {
	if ss.s.opts.Spin > 0 {
		ss.be.SetSpinner(nil) // the connection goes to another session, or away
	}
	ss.be = nil
	ss.killMu.Lock() // waits for a KILL aimed at be to finish: after Release be may serve another session
	ss.killBE = nil
	ss.killMu.Unlock()
}

// releaseBackend gives back the connection the session holds as it ends (or changes user): with its state when
// keyway carries all of it, reset when the session left state keyway does not carry, discarded when unknown.
func (ss *session) releaseBackend() {
	be := ss.be
	if be == nil {
		return
	}
	ss.detach()
	if pinned, _ := ss.pinned(); pinned {
		be.MarkDirty()
	}
	if !ss.quit && be.Status&mysqlwire.StatusInTrans != 0 {
		// The client vanished inside a transaction: do not trust a reset to clean up after it.
		be.MarkBroken()
	}
	be.Release()
}

// clientError is the ERR a client gets for a failed lease: the server's own refusal (a dropped database) as it
// is, a checkout failure as backendError says.
func clientError(g *backend.Group, err error) *mysqlwire.Error {
	var ue *backend.UnavailableError
	var be *backend.BusyError
	var le *backend.LoginError
	var fe *backend.FencedError
	if errors.As(err, &ue) || errors.As(err, &be) || errors.As(err, &le) || errors.As(err, &fe) {
		return backendError(err)
	}
	if me, ok := errors.AsType[*mysqlwire.Error](err); ok {
		return me
	}
	return lostBackend(g, err)
}

// backendError turns a checkout failure into the ERR a client gets.
func backendError(err error) *mysqlwire.Error {
	var ue *backend.UnavailableError
	if errors.As(err, &ue) {
		return mysqlwire.NewError(mysqlwire.ERUnknownError, "HY000", "%s", err.Error())
	}
	var be *backend.BusyError
	if errors.As(err, &be) {
		return mysqlwire.NewError(mysqlwire.ERConCount, "08004", "%s", err.Error())
	}
	var le *backend.LoginError
	if errors.As(err, &le) {
		return mysqlwire.NewError(mysqlwire.ERAccessDenied, "28000", "%s", err.Error())
	}
	return mysqlwire.NewError(mysqlwire.ERUnknownError, "HY000", "%s", err.Error())
}

func lostBackend(g *backend.Group, err error) *mysqlwire.Error {
	return mysqlwire.NewError(mysqlwire.ERConnectionKilled, "70100",
		"keyway: lost connection to backend group %s (%s) during the command: %v; the session's state is gone, reconnect",
		g.Name(), g.Addr(), err)
}

// sendErr writes e to the client, dropping anything buffered but unsent.
func (ss *session) sendErr(e *mysqlwire.Error) {
	ss.c.Discard()
	_ = ss.c.WriteError(e)
}

func remoteHost(nc net.Conn) string {
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil || host == "" {
		return "localhost"
	}
	return host
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, errSessionEnd)
}

// command reads one command from the client and runs it. A non-nil error ends the session.
func (ss *session) command() error {
	c := ss.c
	c.ResetSeq()
	watched := ss.armWatch()
	p, err := c.ReadPacket()
	if watched && ss.stopWatch() {
		ss.be.MarkBroken()
		_, why := ss.pinned()
		ss.s.log.Info("backend connection closed by the server while the session was idle; the session had state, so its client connection was closed at once",
			"session", ss.id, "user", ss.hs.User, "state", cmp.Or(why, "it has prepared statements"))
		return errSessionEnd
	}
	if err != nil {
		switch {
		case errors.Is(err, mysqlwire.ErrPacketsOutOfOrder):
			ss.sendErr(mysqlwire.NewError(mysqlwire.ERNetPacketsOutOfOrder, "08S01", "Got packets out of order: %v", err))
		case errors.Is(err, mysqlwire.ErrPacketTooLarge):
			ss.sendErr(mysqlwire.NewError(mysqlwire.ERNetPacketTooLarge, "08S01",
				"Got a packet bigger than 'max_allowed_packet' bytes (keyway accepts %d)", mysqlwire.DefaultMaxPacket))
		}
		return err
	}
	if ss.interrupted.Load() {
		return errSessionEnd // killed, or the server stops: what came after is not run
	}
	if len(p) == 0 {
		ss.sendErr(mysqlwire.NewError(mysqlwire.ERMalformedPacket, "08S01", "Malformed communication packet: empty command"))
		return errSessionEnd
	}
	// A connection kept for this command (holdNext) serves it; whether it is kept longer, this command decides.
	ss.holdNext, ss.retried = false, false
	func() {
		ss.s.spinGate.Begin(uint64(ss.id)) // a statement in flight: others' spins wait (see Options.Spin)
		defer ss.s.spinGate.End()
		err = ss.dispatch(p)
	}()
	if err != nil {
		return err
	}
	ss.release()
	ss.publishPins(false)
	return nil
}

// dispatch runs one command.
func (ss *session) dispatch(p []byte) error {
	c := ss.c
	switch p[0] {
	case comQuit:
		ss.quit = true
		return errSessionEnd
	case comQuery:
		return ss.query(p)
	case comStmtPrepare, comStmtExecute, comStmtFetch, comStmtSendLongData, comStmtClose, comStmtReset:
		return ss.stmtCommand(p) // prepared.go
	case comFieldList:
		return ss.forward(p, relay.fieldList)
	case comInitDB:
		db := string(p[1:])
		return ss.forward(p, func(r relay) (int64, bool, error) {
			_, failed, err := r.one()
			if err == nil && !failed {
				r.be.State.DB, r.be.DBKnown = db, true
			}
			return 0, failed, err
		})
	case comSetOption:
		// Multi-statements on or off: state of the connection that keyway does not carry.
		ss.pin.set |= pinSet(PinVariable)
		return ss.forward(p, relay.one)
	case comPing, comStatistics:
		return ss.forward(p, relay.one)
	case comResetConnection:
		return ss.resetConnection()
	case comChangeUser:
		return ss.changeUser(p)
	}
	if err := c.WriteError(mysqlwire.NewError(mysqlwire.ERUnknownCom, "08S01",
		"Unknown command 0x%02x: keyway relays COM_QUERY, COM_INIT_DB, COM_PING, COM_QUIT, COM_FIELD_LIST, COM_STATISTICS, COM_SET_OPTION, COM_RESET_CONNECTION, COM_CHANGE_USER and the COM_STMT_* family", p[0])); err != nil {
		return err
	}
	return nil
}

// freshBackend makes sure the backend connection the session holds, when it sat idle, is still there before a
// command goes out on it. The server may have closed it meanwhile (wait_timeout, a restart). A session with no state
// on it (not pinned) drops it and borrows another at once (lease), and never notices, as ProxySQL does. A session
// with state cannot have it back: keyway closes the client's connection without a word, as the server's close would
// look to a client connected directly, so the driver's own reconnect logic takes over. For a session with state the
// idle watch (idlewatch.go) has usually done so already, as soon as the server closed the connection. It reports
// whether the session still holds a usable connection.
func (ss *session) freshBackend(now time.Time) (bool, error) {
	if now.Sub(ss.beUsed) < staleAfter || ss.be.Alive() {
		return true, nil
	}
	be := ss.be
	be.MarkBroken()
	if pinned, why := ss.pinned(); pinned {
		ss.s.log.Info("backend connection closed by the server while the session was idle; the session had state, so its client connection is closed too",
			"session", ss.id, "user", ss.hs.User, "state", why)
		return false, errSessionEnd
	}
	ss.detach()
	be.Release()
	ss.s.log.Debug("backend connection closed by the server while the session was idle; borrowing another", "session", ss.id, "user", ss.hs.User)
	return false, nil
}

// send relays a command that has no reply.
func (ss *session) send(p []byte) error {
	if e, err := ss.lease(nil); e != nil || err != nil {
		return err // no reply to carry e: the command is dropped, as a dead connection would
	}
	return ss.writeCommand(p, false)
}

// staleAfter is how long a backend connection may sit idle before a command checks that the server has not
// dropped it (wait_timeout is at least a second, and a restart drops every connection).
const staleAfter = time.Second

// writeCommand sends command p to the backend connection the session holds (lease) as a new exchange (sequence 0).
// With replyNext, the caller reads the reply next and nothing else before it: the command goes out with that read
// (FlushBeforeReply), and a failure to send it is the read's. A failure breaks the backend connection, tells the
// client, and ends the session.
func (ss *session) writeCommand(p []byte, replyNext bool) error {
	be := ss.be
	ss.beUsed = time.Now()
	be.ResetSeq()
	err := be.WritePacket(p)
	switch {
	case err != nil:
	case replyNext:
		err = be.FlushBeforeReply()
	default:
		err = be.Flush()
	}
	if err != nil {
		be.MarkBroken()
		ss.sendErr(lostBackend(ss.user.group, err))
		return errSessionEnd
	}
	return nil
}

// forward sends command p to the backend and streams the reply to the client with relay. It reports relay's
// outcome; an error from either side ends the session (the client has been told when it can be).
func (ss *session) forward(p []byte, fn func(relay) (int64, bool, error)) error {
	_, _, err := ss.exchange(p, nil, nil, fn, toClient)
	return err
}

// exchange is the pipeline's third step (pipeline.go): command p, with its plan (nil for commands that are not
// statements), goes to the connection the session borrows for it (lease), and relay streams the reply to sink. A
// COM_STMT_* command names its prepared statement st: p then gets the id of the statement on that connection
// (onConnection). The tables the
// plan names are settled before it is sent, and those it writes are invalidated before the reply is flushed to
// the client. It returns the row count and whether the reply was an ERR.
func (ss *session) exchange(p []byte, plan *Plan, st *prepared, fn func(relay) (int64, bool, error), to sink) (int64, bool, error) {
	saved := ss.dst
	ss.dst = to.conn(ss)
	defer func() { ss.dst = saved }()
	e := ss.settle(plan)
	if e == nil {
		var err error
		if e, err = ss.lease(plan); err != nil {
			return 0, true, err
		}
	}
	if e == nil && st != nil {
		var err error
		if p, e, err = ss.onConnection(st, p); err != nil {
			return 0, true, err
		}
		defer func() { ss.exec = execState{} }()
	}
	if e != nil {
		if err := ss.c.WriteError(e); err != nil {
			return 0, true, err
		}
		return 0, true, ss.c.Flush()
	}
	if err := ss.writeCommand(p, true); err != nil {
		return 0, true, err
	}
	be := ss.be
	ss.warned, ss.relayedPkts = false, 0
	gtid := be.State.LastGTID
	rows, failed, err := fn(relay{ss: ss, be: be})
	if err == nil {
		ss.status, ss.db = be.Status, be.State.DB
		if failed || ss.warned || (plan != nil && plan.KeepNext) {
			ss.holdNext = true // the next statement may read this one's diagnostics (Plan.KeepNext)
		}
		ss.notePosition(plan, gtid, be, ss.txTables) // before the client hears of the write (replicas.go)
		ss.invalidateWritten(plan, failed)
		ss.pin.note(plan, failed)
		err = ss.c.Flush()
		if err != nil {
			be.MarkBroken() // the reply is complete on the backend side, but be safe: the client is gone
		}
		return rows, failed, err
	}
	be.MarkBroken()
	var we *mysqlwire.WriteError
	if errors.As(err, &we) || errors.Is(err, errSessionEnd) {
		return rows, true, err // the client is gone, or has been told
	}
	// The backend failed mid-reply. A read with no side effects of an unpinned session, of whose reply the client
	// has seen nothing, runs again on another connection, once; anything else is never sent again.
	pinned, _ := ss.pinned()
	ss.detach()
	be.Release() // closed: broken
	if !pinned && !ss.retried && ss.relayedPkts == 0 && retrySafe(plan) {
		ss.retried = true
		ss.s.log.Debug("sql: backend connection lost before the reply; the read runs again on another connection",
			"session", ss.id, "err", err)
		return ss.exchange(p, plan, st, fn, to)
	}
	// An ERR is legal at any point of a reply, and the client must not wait. Not 2013: MariaDB's client library
	// takes a client error number (2000-2999) in an ERR for a malformed packet (and sysbench then crashes).
	lostGroup := ss.user.group
	if be.Pool() != nil {
		lostGroup = be.Pool().Group() // a shard's or a replica's, where the statement ran
	}
	ss.sendErr(mysqlwire.NewError(mysqlwire.ERConnectionKilled, "70100",
		"Lost connection to server during query (keyway: the connection to backend group %s (%s) failed: %v; the statement was not sent again, since it may have taken effect)",
		lostGroup.Name(), lostGroup.Addr(), err))
	if pinned {
		return rows, true, errSessionEnd // the session's state was on that connection
	}
	return rows, true, nil // its state is keyway's: the session goes on with its next statement
}

// retrySafe reports whether plan may run twice: one autocommit read without side effects (no pin: no locks,
// sequences or variables; not a multi-statement; not KILL).
func retrySafe(plan *Plan) bool {
	return plan != nil && plan.Class == ClassRead && plan.Pins == 0 && !plan.multi && plan.Kill == KillNone
}

// query runs COM_QUERY: plan, relay, statistics.
func (ss *session) query(p []byte) error {
	start := time.Now()
	// A view of the packet, not a copy: read while the command runs and kept by nothing (the plan cache keeps a
	// copy of what it stores), so a statement answered from the result cache allocates nothing.
	sql := unsafe.String(unsafe.SliceData(p[1:]), len(p)-1)
	if what, ok := showKeyway(sql); ok {
		return ss.answerShowKeyway(what)
	}
	plan := ss.s.plans.Plan(sql)
	if plan.Kill != KillNone {
		return ss.kill(p, plan)
	}
	if ss.s.shardMap() != nil {
		if done, err := ss.routeQuery(p, sql, plan, start); done {
			return err
		}
		defer func() { ss.shard = nil }()
	}
	if h := ss.hintFor(sql, plan); ss.route(plan, h) == toCache {
		return ss.queryThroughCache(p, sql, plan, h.ttl, start)
	}
	rows, failed, err := ss.exchange(p, plan, nil, relay.queryResults, toClient)
	ss.record(plan, rows, time.Since(start), failed || err != nil)
	return err
}

func (ss *session) record(plan *Plan, rows int64, latency time.Duration, failed bool) {
	class := plan.Class.String()
	if d := ss.s.opts.Digests; d != nil {
		d.Record(digests.Key{Fingerprint: plan.Fingerprint, Digest: plan.Digest, Normalized: plan.Normalized,
			Class: class, Schema: ss.db, User: ss.hs.User}, rows, latency, failed)
	}
	if m := ss.s.opts.Metrics; m != nil {
		m.ObserveQuery(class, latency, failed)
	}
}

// changeUser runs COM_CHANGE_USER: authenticate the new user against keyway's users, then switch to a backend
// connection with that user's backend credentials.
func (ss *session) changeUser(p []byte) error {
	caps := ss.hs.Capabilities
	rest := p[1:]
	name, rest, ok := cutNul(rest)
	var reply []byte
	if ok {
		if caps&mysqlwire.ClientSecureConnection != 0 {
			if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
				ok = false
			} else {
				reply, rest = rest[1:1+int(rest[0])], rest[1+int(rest[0]):]
			}
		} else {
			reply, rest, ok = cutNul(rest)
		}
	}
	var db, plugin []byte
	if ok {
		db, rest, ok = cutNul(rest)
	}
	collation := ss.hs.Collation
	if ok && len(rest) >= 2 {
		collation = rest[0]
		rest = rest[2:]
		if caps&mysqlwire.ClientPluginAuth != 0 && len(rest) > 0 {
			if plugin, _, ok = cutNul(rest); !ok {
				plugin, ok = rest, true
			}
		}
	}
	if !ok {
		ss.sendErr(mysqlwire.NewError(mysqlwire.ERMalformedPacket, "08S01", "Malformed communication packet: COM_CHANGE_USER"))
		return errSessionEnd
	}
	userName, dbName, pluginName := string(name), string(db), string(plugin)
	reply = append([]byte(nil), reply...)
	if pluginName == "" {
		pluginName = mysqlwire.NativePassword
	}
	if ss.s.throttle.blocked(ss.remote) {
		ss.sendErr(ss.s.throttle.errHostBlocked(ss.remote))
		return errSessionEnd
	}
	ss.accounts = ss.s.accounts.Load()
	cfg := ss.s.serverConfig(ss.remote, ss.accounts)
	acct, err := mysqlwire.ServerAuth(ss.c, cfg, userName, ss.hs.Scramble, pluginName, reply)
	if err != nil {
		return errSessionEnd // refused: ERR sent; MySQL also closes the connection
	}
	ss.quit = true // a clean hand-over: the old connection is pooled (reset if it holds state keyway does not carry)
	ss.releaseBackend()
	ss.quit = false
	ss.hs.User, ss.hs.Account, ss.hs.Collation = acct.User, acct, collation
	ss.user = ss.accounts.users[acct.User]
	ss.stmts, ss.pin, ss.pendingBegin = nil, pinState{}, ""
	if err := ss.attach(dbName); err != nil {
		return err
	}
	ss.setKillUser()
	return ss.c.WriteOK(ss.status)
}

// resetConnection answers COM_RESET_CONNECTION: the session goes back to the state of a new login with its default
// database (as MariaDB keeps it), without prepared statements or pins. The connection it held, if any, is reset
// before it serves anyone else (MarkDirty). No round trip: nothing of the session is left on a backend connection.
func (ss *session) resetConnection() error {
	if be := ss.be; be != nil {
		ss.detach()
		be.MarkDirty()
		be.Release()
	}
	ss.stmts, ss.pin, ss.txTables, ss.txSeen, ss.pendingBegin = nil, pinState{}, ss.txTables[:0], false, ""
	db := ss.state.DB
	ss.state = ss.pool.Baseline()
	ss.state.DB = db
	ss.status = mysqlwire.StatusAutocommit
	return ss.c.WriteOK(ss.status)
}

func cutNul(p []byte) (s, rest []byte, ok bool) {
	for i, b := range p {
		if b == 0 {
			return p[:i], p[i+1:], true
		}
	}
	return nil, nil, false
}

// errUnexpected reports a backend reply keyway cannot follow.
func errUnexpected(what string, first []byte) error {
	b := byte(0)
	if len(first) > 0 {
		b = first[0]
	}
	return fmt.Errorf("%w: unexpected backend packet 0x%02x %s", mysqlwire.ErrMalformed, b, what)
}

// writesTables reports whether plan may change the rows of the tables it names.
func writesTables(plan *Plan) bool {
	return (plan.Class == ClassWrite || plan.Class == ClassDDL || plan.Class == ClassOther) && len(plan.Tables) > 0
}

// settle waits, before a statement that names tables is sent, for the writes keyway acknowledged to them
// through other doors (see validity.Registry.Settle); a failure becomes the client's error.
func (ss *session) settle(plan *Plan) *mysqlwire.Error {
	reg := ss.s.opts.Validity
	if plan == nil || reg == nil || len(plan.Tables) == 0 {
		return nil
	}
	if err := reg.Settle(plan.TableIDs(ss.db)); err != nil {
		return mysqlwire.NewError(mysqlwire.ERUnknownError, "HY000", "keyway: the statement was not sent: %v", err)
	}
	return nil
}

// invalidateWritten tells the cache about the tables the statement wrote
// (even when it failed: part of a multi-statement may have applied), and,
// when a transaction ends, about every table written inside it.
func (ss *session) invalidateWritten(plan *Plan, failed bool) {
	reg := ss.s.opts.Validity
	if plan == nil || reg == nil {
		return
	}
	if plan.InTransaction && !failed {
		ss.txSeen = true
	}
	if writesTables(plan) {
		ids := plan.TableIDs(ss.db)
		reg.Invalidate(ids)
		if ss.txSeen {
			// Qualified now: the database may change before COMMIT.
			for _, id := range ids {
				if !slices.Contains(ss.txTables, id) {
					ss.txTables = append(ss.txTables, id)
				}
			}
		}
	}
	if (plan.EndsTransaction || plan.Class == ClassDDL) && len(ss.txTables) > 0 {
		reg.Invalidate(ss.txTables)
		ss.txTables = ss.txTables[:0]
	}
}

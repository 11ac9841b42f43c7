package sqlproxy

// This file throttles repeated failed logins per client address (Options.MaxAuthFailures).
//
// Each address has a leaky bucket: a failed login (ERR 1045, in the handshake or COM_CHANGE_USER) adds one, and
// the bucket drains at max per window (a minute). While one more would overflow it, the address is blocked: a new
// connection from it gets ER_HOST_IS_BLOCKED (1129) in place of the greeting and is closed, as MariaDB answers a
// host past max_connect_errors. So an address may fail max logins in a burst and then about one per window/max,
// whichever passwords it tries; a success does not empty the bucket (one known account must not buy more guesses
// at others).
//
// Why a refusal and not a delay: a delayed login holds a handshake slot (Options.MaxHandshakes) and a goroutine
// for the delay, so a guesser would fill the slots and lock everyone out; the refusal costs nothing, happens before
// any authentication, is a protocol-correct ERR drivers show as such, and names the reason. Like MariaDB's block
// it can shut out honest clients behind the same address (NAT) while the guessing goes on; it lifts by itself.
//
// Memory: one small entry per address that failed recently; entries that have drained are swept once per window.
//
// The same bucket bounds the log: each failed login is logged (user, address, reason; never the password), at most
// loginLogBurst per address in a burst and then about one per window/loginLogBurst, so a guesser cannot flood the
// log even without MaxAuthFailures; the line that reaches either limit says so.

import (
	"fmt"
	"sync"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

type authThrottle struct {
	max    float64       // failures per window; 0 = unlimited
	window time.Duration // a minute; tests shorten it

	mu struct {
		sync.Mutex
		hosts     map[string]*authBucket
		lastSweep time.Time
	}
}

type authBucket struct {
	level float64 // failures not yet drained, as of at
	at    time.Time
}

func newAuthThrottle(maxPerMinute int) *authThrottle {
	t := &authThrottle{max: float64(maxPerMinute), window: time.Minute}
	t.mu.hosts = make(map[string]*authBucket)
	return t
}

// drainedLocked returns b's level at now.
func (t *authThrottle) drainedLocked(b *authBucket, now time.Time) float64 {
	return max(0, b.level-t.max*float64(now.Sub(b.at))/float64(t.window))
}

// blocked reports whether host has failed too many logins lately.
func (t *authThrottle) blocked(host string) bool {
	if t.max <= 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.mu.hosts[host]
	// Blocked while one more failure would overflow the bucket (not "level ≥ max": the level starts draining the
	// moment a failure lands, so it never reads exactly max).
	return b != nil && t.drainedLocked(b, time.Now())+1 > t.max
}

// failed records a failed login from host and reports whether it is the one that blocks host.
func (t *authThrottle) failed(host string) (blocks bool) {
	if t.max <= 0 {
		return false
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.mu.hosts[host]
	if b == nil {
		b = &authBucket{}
		t.mu.hosts[host] = b
	}
	level := t.drainedLocked(b, now)
	b.level, b.at = level+1, now
	blocks = level+1 <= t.max && b.level+1 > t.max
	if now.Sub(t.mu.lastSweep) >= t.window {
		t.mu.lastSweep = now
		for h, x := range t.mu.hosts {
			if t.drainedLocked(x, now) == 0 {
				delete(t.mu.hosts, h)
			}
		}
	}
	return blocks
}

// loginLogBurst is how many failed logins per address are logged in a burst (see the file comment).
const loginLogBurst = 10

// loginDenied logs a failed login of user from remote (reason: why it failed) and counts it against the address:
// in the throttle, which may now block it, and in the log's own bucket.
// A refusal that checked no password (TLS required) is logged without counting in the throttle (guess false).
func (s *Server) loginDenied(remote, user, reason string, guess bool) {
	blocked := guess && s.throttle.failed(remote)
	if s.loginLog.blocked(remote) {
		return
	}
	quiet := s.loginLog.failed(remote)
	args := []any{"user", user, "remote", remote, "reason", reason}
	if blocked {
		args = append(args, "blocked", fmt.Sprintf("this address's logins are refused (ER_HOST_IS_BLOCKED) until its failures age: more than %d per %v, sql.max_auth_failures", int(s.throttle.max), s.throttle.window))
	}
	if quiet {
		args = append(args, "log", fmt.Sprintf("further failed logins from this address are not logged until they slow below %d per %v", loginLogBurst, s.loginLog.window))
	}
	s.log.Warn("sql: failed login", args...)
}

// errHostBlocked is the refusal of a blocked host, worded as MariaDB's ER_HOST_IS_BLOCKED.
func (t *authThrottle) errHostBlocked(host string) *mysqlwire.Error {
	return mysqlwire.NewError(mysqlwire.ERHostIsBlocked, "HY000",
		"Host '%s' is blocked because of many connection errors (keyway: more than %d failed logins per %v, sql.max_auth_failures); it is unblocked as the failures age",
		host, int(t.max), t.window)
}

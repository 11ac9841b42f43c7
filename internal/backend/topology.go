package backend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/sockio"
)

// Topology is every backend group keyway knows, built once by the server and shared by the SQL door, the
// containers and the binlog followers (ReplicaLogin). It owns the groups: Close stops them all.
type Topology struct {
	groups []*Group
	byName map[string]*Group
}

// NewTopology starts a Group for each of opts, in order; the first is the default group. Names must be unique
// and non-empty (the config guarantees it; an error here is a programming mistake reported, not a panic).
func NewTopology(opts []GroupOptions) (*Topology, error) {
	t := &Topology{byName: make(map[string]*Group, len(opts))}
	for _, o := range opts {
		if o.Name == "" || o.Primary.Address == "" || t.byName[o.Name] != nil {
			t.Close()
			return nil, fmt.Errorf("backend: group %q: a group needs a unique name and a primary address", o.Name)
		}
		g := NewGroup(o)
		if tlsErr := g.srv.Load().tlsErr; tlsErr != nil {
			g.Close()
			t.Close()
			return nil, fmt.Errorf("backend: group %q: %w", o.Name, tlsErr)
		}
		t.groups = append(t.groups, g)
		t.byName[o.Name] = g
	}
	return t, nil
}

// ErrNoGroups is returned by Default on a topology without groups.
var ErrNoGroups = errors.New("no [[groups]] configured: add a backend group (name, primary)")

// Group returns the group named name, or nil.
func (t *Topology) Group(name string) *Group { return t.byName[name] }

// Default returns the first group: the one users and containers without a group go to.
func (t *Topology) Default() (*Group, error) {
	if len(t.groups) == 0 {
		return nil, ErrNoGroups
	}
	return t.groups[0], nil
}

// Groups returns the groups in configuration order. The slice is the topology's own: do not modify it.
func (t *Topology) Groups() []*Group { return t.groups }

// Stats returns the state of every pool of every group.
func (t *Topology) Stats() []PoolStats {
	var out []PoolStats
	for _, g := range t.groups {
		out = append(out, g.Stats()...)
	}
	return out
}

// Close stops every group.
func (t *Topology) Close() {
	for _, g := range t.groups {
		g.Close()
	}
}

// SQLConfig is a go-sql-driver configuration that logs in with keyway's own account on the group
// (GroupOptions.User) and dials as DialWritable does, so a database/sql pool built on it follows the group's
// writable member and shares its health state. The caller adds its own parameters.
//
// TLS follows the group's mode as for the SQL door's connections: Config.TLS is the group's own configuration
// (verification in its VerifyConnection), with AllowFallbackToPlaintext for "preferred"; for "required" and
// "verify" DialWritable refuses a server that does not offer TLS with a *TLSError.
func (g *Group) SQLConfig() *mysql.Config {
	dc := mysql.NewConfig()
	dc.User, dc.Passwd = g.cfg.User, g.cfg.Password
	srv := g.srv.Load()
	dc.Net, dc.Addr = srv.Network, srv.Address // for messages; DialFunc decides
	dc.Timeout = g.cfg.ConnectTimeout
	dc.DialFunc = g.dialPooled
	// The connections check themselves before a request that follows an idle spell, with a raw call
	// (sockio.WrapPooled); go-sql-driver's own check wakes the runtime's sysmon once per statement.
	dc.CheckConnLiveness = !sockio.ChecksPooled
	if srv.tls != nil {
		dc.TLS = srv.tls.Clone()
		if g.cfg.TLS == TLSPreferred {
			dc.AllowFallbackToPlaintext = true
			// go-sql-driver v1.9.3 falls back by setting TLS = nil on the connector's own Config, shared by every
			// connection (a data race, and every later connection would stay plaintext). With a BeforeConnect hook
			// each connection works on a clone.
			_ = dc.Apply(mysql.BeforeConnect(func(context.Context, *mysql.Config) error { return nil }))
		}
	}
	return dc
}

// ReplicaLogin is how a connection made with go-mysql's client (the binlog follower's) reaches the group: keyway's
// own account, dialed through DialWritable, and TLS as the group's mode asks. go-mysql knows no "preferred" (a
// TLS configuration makes TLS required), so for "preferred" TLS is used when the primary's last handshake offered
// it, and not otherwise.
func (g *Group) ReplicaLogin() (user, password string, dial func(ctx context.Context, network, addr string) (net.Conn, error), tc *tls.Config) {
	if srvTLS := g.srv.Load().tls; srvTLS != nil {
		offered := false
		if info := g.ServerInfo(); info != nil {
			offered = info.Capabilities&mysqlwire.ClientSSL != 0
		}
		if g.cfg.TLS != TLSPreferred || offered {
			tc = srvTLS.Clone()
		}
	}
	return g.cfg.User, g.cfg.Password, g.DialWritable, tc
}

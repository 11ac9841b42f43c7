package server

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/keywaydb/keyway/internal/admin"
	"github.com/keywaydb/keyway/internal/stats"
)

// The admin listener's view of the server: the samples /metrics exports for backend members, containers and the
// store (which the dashboard reads back from the registry), and the parts /readyz checks.

// adminSamples are cacheSamples plus the backend, container and store figures.
func (s *Server) adminSamples() []stats.Sample {
	out := s.cacheSamples()
	add := func(name, help, group string, v float64, labels ...[2]string) {
		out = append(out, stats.Sample{Name: name, Help: help, Group: group, Labels: labels, Value: v})
	}
	boolean := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for i, g := range s.topo.Groups() {
		up, _ := g.Healthy()
		add(stats.BackendUp, "1 while the member answers keyway's health checks.", g.Name(), boolean(up),
			[2]string{"address", g.Addr()}, [2]string{"role", "primary"})
		add(stats.BackendPoolMaxConnections, "The most connections one pool of the group may open (groups.max_open).",
			g.Name(), float64(s.cfg.Groups[i].MaxOpen))
		for _, m := range g.Members() { // the primary first, then the replicas
			addr := [2]string{"address", m.Address}
			add(stats.BackendReads, "Reads that may run on a replica, by the member routing sent them to.", g.Name(), float64(m.Reads), addr)
			if m.Primary {
				continue
			}
			add(stats.BackendUp, "1 while the member answers keyway's health checks.", g.Name(), boolean(m.Up),
				addr, [2]string{"role", "replica"})
			if m.Known {
				add(stats.BackendReplicaLag, "How long ago the primary first had a commit the replica lacks (0: none).", g.Name(), m.Lag.Seconds(), addr)
			}
		}
	}
	if s.shards != nil {
		add(stats.ShardMapVersion, "The version of the shard map statements and keys are routed by.", "", float64(s.ShardMapVersion()))
	}
	for _, t := range s.containers.tables {
		st := t.Status()
		c := [2]string{"container", t.Name}
		add(stats.ContainerInfo, "A container's table, group, policies and write mode, as labels; always 1.", "", 1,
			c, [2]string{"table", st.Table}, [2]string{"group", t.Group},
			[2]string{"get", st.Get.String()}, [2]string{"set", st.Set.String()},
			[2]string{"delete", st.Delete.String()}, [2]string{"flush", st.Flush.String()},
			[2]string{"write", st.Write})
		add(stats.ContainerChecked, "1 once the container checked its table and serves.", "", boolean(st.Checked), c)
		add(stats.ContainerBatches, "Group-commit statements run on the container's table.", "", float64(st.GroupCommit.Batches), c)
		add(stats.ContainerBatchedRows, "Rows those group-commit statements carried.", "", float64(st.GroupCommit.BatchedSets), c)
		if wb := st.WriteBehind; wb != nil {
			add(stats.ContainerWBPending, "Rows acknowledged and queued for the table (write = \"async\").", "", float64(wb.Pending), c)
			add(stats.ContainerWBPendingBytes, "Bytes of the rows queued for the table.", "", float64(wb.PendingBytes), c)
			add(stats.ContainerWBWritten, "Queued rows the table took.", "", float64(wb.Written), c)
			add(stats.ContainerWBDropped, "Queued rows the table refused: acknowledged writes that did not reach MySQL.", "", float64(wb.Dropped), c)
			add(stats.ContainerWBFailedRounds, "Write-behind rounds that could not reach the table.", "", float64(wb.FailedRounds), c)
		}
	}
	persistent := "off"
	if s.store.Persistent() {
		persistent = "on"
	}
	add(stats.StoreInfo, "The local store's persistence (on/off) and durability, as labels; always 1.", "", 1,
		[2]string{"persistent", persistent}, [2]string{"durability", s.durability()})
	return out
}

// durability is the store's effective durability: none without a data directory.
func (s *Server) durability() string {
	if !s.store.Persistent() {
		return "none"
	}
	return s.cfg.Store.Durability
}

// readiness is what /readyz checks: every configured door listening, the store loaded, every group reachable.
func (s *Server) readiness() []admin.Part {
	var parts []admin.Part
	// The admin listener starts after the store has loaded (Start loads it before any port opens).
	st := s.store.Stats()
	parts = append(parts, admin.Part{Name: "store", Ready: true,
		State: "loaded: " + strconv.FormatInt(st.CurrItems, 10) + " items, durability " + s.durability()})
	if s.cfg.Memcache.Listen != "" {
		p := admin.Part{Name: "memcache door", State: "not listening"}
		if s.memcache != nil && s.memcache.Stats()["accepting_conns"] == 1 {
			p.Ready, p.State = true, "listening on "+s.mcLn.Addr().String()
		}
		parts = append(parts, p)
	}
	if s.cfg.SQL.Listen != "" {
		p := admin.Part{Name: "SQL door", State: "not listening"}
		if s.sql != nil && s.sqlLn != nil {
			p.Ready, p.State = true, "listening on "+s.sqlLn.Addr().String()
		}
		parts = append(parts, p)
	}
	for _, g := range s.topo.Groups() {
		p := admin.Part{Name: "group " + g.Name(), Ready: true, State: "up: " + g.Addr()}
		if up, err := g.Healthy(); !up {
			p.Ready, p.State = false, fmt.Sprintf("down: %s: %v", g.Addr(), err)
		}
		parts = append(parts, p)
	}
	return parts
}

// adminBind is the address the admin listener binds for [admin] listen: a missing host means loopback, not every
// interface, so exposing the admin endpoints to other hosts takes an explicit "0.0.0.0:port" (or a host's address).
func adminBind(listen string) string {
	if host, port, err := net.SplitHostPort(listen); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return listen
}

// warnOpenAdmin says loudly when the admin listener is reachable from other hosts with no token: its endpoints
// show the server's state and digests (never a password) and let anyone reset the digest statistics.
func warnOpenAdmin(log *slog.Logger, addr net.Addr, token bool) {
	tcp, ok := addr.(*net.TCPAddr)
	if token || !ok || tcp.IP.IsLoopback() {
		return
	}
	log.Warn("the admin listener is open to other hosts without a token: set [admin] token, or listen on 127.0.0.1", "admin", addr.String())
}

package server

import (
	"strings"

	"github.com/keywaydb/keyway/internal/binlog"
	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/warm"
)

// Warm restart (package warm): the snapshot is loaded and stamped before the followers start, restored once they
// run from its checkpoints, and saved again at a clean stop.

// loadWarm reads the last snapshot and takes its stamps. Call it before the followers start.
func (s *Server) loadWarm() *warm.Snapshot {
	sn, err := warm.Load(s.store)
	if err != nil {
		s.log.Warn("warm restart: cached copies start empty", "err", err)
		return nil
	}
	if sn != nil {
		sn.Prepare(s.validity, s.engine)
	}
	return sn
}

// restoreWarm puts the snapshot's copies back. Call it after the followers started and the SQL cache exists.
func (s *Server) restoreWarm(sn *warm.Snapshot) {
	if sn == nil {
		return
	}
	defer s.engine.CopiesRestored()
	n, err := sn.Restore(s.warmGroups((*binlog.Follower).ResumedFrom), s.containerShapes(), s.engine, s.sqlCache)
	if err != nil {
		s.log.Warn("warm restart: the saved copies are not restored; caches start empty", "reason", err, "saved", sn.Saved())
		return
	}
	// Copies of a group nothing vouches for (no follower, no ttl) are not restored (validity.Gate.Restorable).
	var vouched, left []string
	for _, g := range s.validity.Gates() {
		if g.Restorable() {
			vouched = append(vouched, g.Group())
		} else {
			left = append(left, g.Group()+" ("+g.Mode().String()+")")
		}
	}
	if len(vouched) == 0 {
		s.log.Info("warm restart: no cached copy restored: no group has a binlog follower (or invalidate = \"ttl\") to vouch for them",
			"not_restored", strings.Join(left, ", "), "saved", sn.Saved())
		return
	}
	s.log.Info("warm restart: cached copies restored; those of groups with a binlog follower are served once it has replayed what was committed since they were saved",
		"rows", n.Rows, "sql_results", n.Results, "groups", strings.Join(vouched, ", "), "not_restored", strings.Join(left, ", "), "saved", sn.Saved())
}

// saveWarm writes the snapshot; call it after the doors closed and before the followers stop.
func (s *Server) saveWarm() {
	if !s.store.Persistent() || (s.sqlCache == nil && !s.engine.HasContainers()) {
		return
	}
	// The checkpoints are read here, before Save walks the copies (see package warm).
	n, err := warm.Save(s.store, s.warmGroups((*binlog.Follower).Checkpoint), s.containerShapes(), s.engine, s.sqlCache)
	if err != nil {
		s.log.Warn("warm restart: the snapshot of cached copies was not saved; the next start is cold", "err", err)
		return
	}
	s.log.Info("warm restart: cached copies saved with the binlog checkpoints", "rows", n.Rows, "sql_results", n.Results,
		"left_out", n.Skipped)
}

// warmGroups are the configured groups as they run, each binlog group with the checkpoint checkpoint gives of its
// follower.
func (s *Server) warmGroups(checkpoint func(*binlog.Follower) *binlog.Checkpoint) []warm.Group {
	following := map[string]*binlog.Follower{}
	for _, f := range s.followers {
		following[f.Status().Group] = f
	}
	out := make([]warm.Group, 0, len(s.cfg.Groups))
	for _, g := range s.cfg.Groups {
		wg := warm.Group{Name: g.Name, Primary: g.Primary, Mode: "off"}
		switch f := following[g.Name]; {
		case f != nil:
			wg.Mode, wg.Checkpoint = "binlog", checkpoint(f)
		case g.Invalidate == config.InvalidateTTL || g.Invalidate == config.InvalidateNone:
			wg.Mode = g.Invalidate
		}
		out = append(out, wg)
	}
	return out
}

// containerShapes are the containers' shapes by name (engine.Table.ContainerShape).
func (s *Server) containerShapes() map[string]string {
	out := map[string]string{}
	for _, t := range s.containerTables() {
		out[t.Name] = t.ContainerShape()
	}
	return out
}

package server

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/keywaydb/keyway/internal/config"
)

// Reload applies what of cfg (the file read again and validated) can change while keyway runs: the SQL door's
// users ([[sql.users]]: new logins use them, sessions already logged in keep theirs) and the cache rules
// ([[cache.rules]] and cache.default_ttl) and the shard map when it comes from the config ([[shard_maps]]: a new
// version is swapped in whole; statements in flight finish where they started). It returns the other keys that differ from the running configuration:
// they take a restart, and stay as they were. On an error nothing changed.
//
// Reload is not safe for concurrent use: the caller (the signal loop) calls it from one goroutine.
func (s *Server) Reload(cfg config.Config) (applied, restart []string, err error) {
	shardsReload := s.shards != nil && s.cfg.Sharding.Source != config.ShardSourceTable
	for _, key := range config.Changed(s.cfg, cfg) {
		if config.IsReloadable(key) && (shardsReload || !strings.HasPrefix(key, "shard_maps")) {
			applied = append(applied, key)
		} else {
			restart = append(restart, key)
		}
	}
	if len(applied) == 0 {
		return nil, restart, nil
	}
	if s.sql != nil {
		// Users first: it is the one that can fail (a group that exists only in the new file), and then the rules
		// must not have changed either.
		opts := s.sqlUsers(cfg.SQL.Users)
		if err := s.sql.SetUsers(opts); err != nil {
			return nil, restart, fmt.Errorf("reload: %w (a new group takes a restart)", err)
		}
		s.sql.SetCacheRules(cacheRules(cfg.Cache))
	}
	if shardsReload && slices.ContainsFunc(applied, func(k string) bool { return strings.HasPrefix(k, "shard_maps") }) {
		// Checked before it is stored: a map that does not build leaves the running one (and says so).
		if _, err := s.loadShardMap(context.Background(), s.shards, cfg); err != nil {
			return nil, restart, fmt.Errorf("reload: %w", err)
		}
		s.reloadShards(context.Background(), s.shards, cfg)
		s.cfg.ShardMaps = cfg.ShardMaps
	}
	s.cfg.SQL.Users = cfg.SQL.Users
	s.cfg.Cache.Rules = cfg.Cache.Rules
	s.cfg.Cache.DefaultTTL = cfg.Cache.DefaultTTL
	return applied, restart, nil
}

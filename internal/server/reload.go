package server

import (
	"fmt"

	"github.com/keywaydb/keyway/internal/config"
)

// Reload applies what of cfg (the file read again and validated) can change while keyway runs: the SQL door's
// users ([[sql.users]]: new logins use them, sessions already logged in keep theirs) and the cache rules
// ([[cache.rules]] and cache.default_ttl). It returns the other keys that differ from the running configuration:
// they take a restart, and stay as they were. On an error nothing changed.
//
// Reload is not safe for concurrent use: the caller (the signal loop) calls it from one goroutine.
func (s *Server) Reload(cfg config.Config) (applied, restart []string, err error) {
	for _, key := range config.Changed(s.cfg, cfg) {
		if config.IsReloadable(key) {
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
	s.cfg.SQL.Users = cfg.SQL.Users
	s.cfg.Cache.Rules = cfg.Cache.Rules
	s.cfg.Cache.DefaultTTL = cfg.Cache.DefaultTTL
	return applied, restart, nil
}

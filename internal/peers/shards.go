package peers

import (
	"context"
	"errors"
	"fmt"
)

// Shards is a sharded farm on this machine: a global server (for the unsharded tables and the keyway_shards
// schema) and n shard servers, each a MariaDB of its own (private data directory, free loopback port, binlog on in
// ROW format) with the accounts and database test that StartMariaDB sets up. No server replicates from another:
// each holds its own rows. Server ids are 1 (the global server), 2, 3, … (the shards, in order), so a binlog
// follower can tell them apart.
type Shards struct {
	Global *MariaDB
	Shards []*MariaDB
}

// StartShards starts the global server and n shard servers (n ≥ 1). mariadb-install-db runs once: the other
// servers start from a copy of that data directory, and all of them start at once. ctx bounds the start only; the
// servers run until Stop.
func StartShards(ctx context.Context, n int) (_ *Shards, err error) {
	if n < 1 {
		return nil, fmt.Errorf("peers: StartShards(%d): want at least one shard", n)
	}
	var all []*MariaDB
	defer func() {
		if err != nil {
			for _, m := range all {
				_ = m.Stop()
			}
		}
	}()
	for i := 0; i <= n; i++ {
		m, err := newMariaDB(MariaDBOptions{ServerID: i + 1})
		if err != nil {
			return nil, err
		}
		all = append(all, m)
	}
	if err := all[0].install(ctx); err != nil {
		return nil, err
	}
	for _, m := range all[1:] {
		if err := copyDir(ctx, all[0].DataDir, m.DataDir); err != nil {
			return nil, err
		}
	}
	if err := eachMember(all, func(m *MariaDB) error {
		if err := m.start(ctx, 0); err != nil {
			return err
		}
		return m.setup(ctx, false)
	}); err != nil {
		return nil, err
	}
	return &Shards{Global: all[0], Shards: all[1:]}, nil
}

// All returns the global server, then the shards.
func (s *Shards) All() []*MariaDB { return append([]*MariaDB{s.Global}, s.Shards...) }

// Stop stops every server for good (MariaDB.Stop) and joins their errors: a server that exited on its own is one.
func (s *Shards) Stop() error {
	var errs []error
	for _, m := range s.All() {
		errs = append(errs, m.Stop())
	}
	return errors.Join(errs...)
}

package backend

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/testenv"
)

// groupOpen is the number of connections all pools of g hold (dials in progress included), at one instant: every
// pool is locked at once (summing each pool's Stats would count a connection that moved between two pools twice).
func groupOpen(g *Group) int {
	g.mu.Lock()
	pools := make([]*Pool, 0, len(g.mu.pools))
	for _, p := range g.mu.pools {
		pools = append(pools, p)
	}
	g.mu.Unlock()
	n := 0
	for _, p := range pools {
		p.mu.Lock()
		defer p.mu.Unlock()
		n += p.mu.open
	}
	return n
}

// eventually polls ok until it holds, failing the test after within.
func eventually(t *testing.T, within time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in time")
		}
	}
}

// TestGroupBudgetSharedAcrossPools: pools of different collations share the group's budget. A pool that needs a
// connection while the budget is used up gets one by another pool's idle connection being closed, at once when
// one is idle, and when one is released while it waits.
func TestGroupBudgetSharedAcrossPools(t *testing.T) {
	m := mariadb(t)
	g := newGroup(t, m.Addr, func(o *GroupOptions) { o.MaxOpen = 10; o.MaxConnections = 3; o.ConnectTimeout = 10 * time.Second })
	a := g.Pool(PoolKey{User: "app", Caps: mysqlwire.ClientDeprecateEOF, Collation: 33}, "secret") // utf8mb3_general_ci
	b := g.Pool(PoolKey{User: "app", Caps: mysqlwire.ClientDeprecateEOF, Collation: 45}, "secret") // utf8mb4_general_ci
	var held []*Conn
	for range 3 {
		c, err := a.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Budget used up by a's connections in use: b waits, and gives up with a message naming the budget.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := b.Get(ctx)
	cancel()
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Err.Code != mysqlwire.ERConCount || !strings.Contains(err.Error(), "max_connections") {
		t.Fatalf("want a budget error with code 1040, got %v", err)
	}
	if n := groupOpen(g); n != 3 {
		t.Fatalf("group holds %d connections, budget 3", n)
	}

	// A waiting b gets a connection when a releases one: a's connection is closed instead of idling.
	got := make(chan *Conn, 1)
	errc := make(chan error, 1)
	go func() {
		c, err := b.Get(context.Background())
		if err != nil {
			errc <- err
			return
		}
		got <- c
	}()
	eventually(t, 5*time.Second, func() bool { return g.budgetWaited() })
	held[0].Release()
	var bc *Conn
	select {
	case bc = <-got:
	case err := <-errc:
		t.Fatalf("waiting pool: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting pool got no connection")
	}
	if n := groupOpen(g); n > 3 {
		t.Fatalf("group holds %d connections, budget 3", n)
	}
	if st := a.Stats(); st.Open != 2 || st.Idle != 0 {
		t.Fatalf("a: %+v", st)
	}
	if v := query(t, bc, "SELECT @@collation_connection"); v != "utf8mb4_general_ci" {
		t.Fatalf("b's connection has collation %s", v)
	}
	bc.Release()

	// a's connections go idle; b needs two: one is its own idle one, the other is made by closing an idle one of a.
	held[1].Release()
	held[2].Release()
	var bs []*Conn
	for range 2 {
		c, err := b.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, c)
	}
	if n := groupOpen(g); n > 3 {
		t.Fatalf("group holds %d connections, budget 3", n)
	}
	if st := a.Stats(); st.Open != 1 {
		t.Fatalf("a still holds %d connections: %+v", st.Open, st)
	}
	for _, c := range bs {
		c.Release()
	}
}

// TestGroupBudgetFromServerLeavesRoom: the default budget is read from the server's max_connections, so after a
// burst wider than the server allows, the pools' idle connections leave room for clients going direct.
func TestGroupBudgetFromServerLeavesRoom(t *testing.T) {
	m := testenv.NewMariaDB(t) // private: max_connections is lowered for this test
	root, err := sql.Open("mysql", m.RootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.Exec("SET GLOBAL max_connections = 20"); err != nil {
		t.Fatal(err)
	}
	g := newGroup(t, m.Addr, func(o *GroupOptions) { o.MaxOpen = 256; o.ConnectTimeout = 10 * time.Second })
	eventually(t, 10*time.Second, func() bool { return g.MaxConnections() == budgetFor(20) })
	pools := []*Pool{
		g.Pool(PoolKey{User: "app", Collation: 33}, "secret"),
		g.Pool(PoolKey{User: "app", Collation: 45}, "secret"),
	}
	// The burst: 40 sessions at once, each holding its connection a moment.
	var wg sync.WaitGroup
	var mu sync.Mutex
	most := 0
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pools[i%2].Get(context.Background())
			if err != nil {
				return // without a budget the server refuses some (1040); with it they wait
			}
			mu.Lock()
			most = max(most, groupOpen(g))
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			c.Release()
		}()
	}
	wg.Wait()
	if most > budgetFor(20) {
		t.Fatalf("the pools held %d connections, budget %d", most, budgetFor(20))
	}
	// The pools keep their idle connections (IdleTimeout is a minute), yet a client going direct gets in.
	for _, dsn := range []string{m.AppDSN, m.RootDSN} {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Ping(); err != nil {
			t.Fatalf("direct connection refused after the burst (pools hold %d): %v", groupOpen(g), err)
		}
		db.Close()
	}
}

package container

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/keywaydb/keyway/internal/testenv"
)

// lockWaitDB is a pool on the shared MariaDB whose sessions give up a lock
// wait after one second (error 1205) instead of InnoDB's default 50.
func lockWaitDB(t *testing.T) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.SharedMariaDB(t).AppDSN)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["innodb_lock_wait_timeout"] = "1"
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// lockRow inserts key (if missing) and holds its row lock in a transaction
// on db until the returned function rolls it back.
func lockRow(t *testing.T, db *sql.DB, table, key string) (release func()) {
	t.Helper()
	exec(t, db, "INSERT IGNORE INTO test."+table+" (c1, c2) VALUES (?, 'locked')", key)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var k string
	if err := tx.QueryRow("SELECT c1 FROM test."+table+" WHERE c1 = ? FOR UPDATE", key).Scan(&k); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { tx.Rollback() }) }
	t.Cleanup(release)
	return release
}

// TestSetCopiesCallerBuffers: a Set whose caller gave up (its context ended)
// may still be written by the group committer, on a retry after its caller
// reused the buffer the key and value came from (as a connection reuses its
// read buffer). The row written must be the one the caller asked for, never
// the bytes that later took the buffer's place.
func TestSetCopiesCallerBuffers(t *testing.T) {
	db := openDB(t)
	exec(t, db, "DROP TABLE IF EXISTS test.demo_owned")
	exec(t, db, "CREATE TABLE test.demo_owned (c1 VARCHAR(32) PRIMARY KEY, c2 VARCHAR(1024), c3 INT UNSIGNED, c4 BIGINT UNSIGNED, c5 INT UNSIGNED)")
	// MaxWait lets the two Sets below join one batch.
	c, err := Open(ctx, lockWaitDB(t), Def{Name: "owned", Schema: "test", Table: "demo_owned", KeyColumn: "c1",
		ValueColumns: []string{"c2"}, CASColumn: "c4"}, Options{MaxWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	release := lockRow(t, db, "demo_owned", "orig")

	// buf plays the connection's read buffer: key and value are slices of it.
	buf := []byte("origvalue")
	gaveUp := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err := c.Set(sctx, buf[:4], Item{Value: buf[4:]})
		gaveUp <- err
	}()
	time.Sleep(50 * time.Millisecond)
	other := make(chan error, 1)
	go func() { // a patient writer in the same batch keeps it worth retrying
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := c.Set(sctx, []byte("other"), Item{Value: []byte("o")})
		other <- err
	}()
	if err := <-gaveUp; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("set on a locked row with a short deadline: %v", err)
	}
	copy(buf, "XXXXgarbage") // the connection reads its next request over the buffer
	// The batch's first statement waits for the lock until 1205 (after 1s);
	// what the committer sends after that must still be "orig".
	time.Sleep(1500 * time.Millisecond)
	release()
	if err := <-other; err != nil {
		t.Fatalf("the patient writer: %v", err)
	}
	if r := readDemo(t, db, "demo_owned", "XXXX"); r.found {
		t.Fatalf("a row under the overwritten key: %+v", r)
	}
	if r := readDemo(t, db, "demo_owned", "orig"); r.v != "value" {
		t.Fatalf("orig = %+v, want the value the caller set", r)
	}
}

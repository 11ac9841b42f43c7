package bench

// Part 3 of keyway bench replicas: a switchover, then a failover, of the group keyway serves, under writers that
// insert rows through keyway and remember every row keyway acknowledged. keyway promotes through its admin
// listener (what keyway switchover and keyway failover call), so it reaches the members over TCP: CHANGE MASTER
// needs a host and a port. Then the same failover on a second primary and two replicas that replicate
// semi-synchronously (AFTER_SYNC), where no acknowledged row may be lost.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/keywaydb/keyway/internal/peers"
)

// Promotions is part 3's figures.
type Promotions struct {
	Writers    int
	Replicated string // the replication mode
	Switchover Promotion
	Failover   Promotion
	// SemiSyncFailover is the failover again, on servers that replicate semi-synchronously (AFTER_SYNC); nil when
	// it could not be measured, and SemiSyncNote says why.
	SemiSyncFailover *Promotion `json:",omitempty"`
	SemiSyncNote     string     `json:",omitempty"`
}

// Promotion is one switchover or failover under the writers.
type Promotion struct {
	Report string // keyway's report, as its admin listener gave it
	// Pause: for a switchover the longest a write took while it ran; for a failover the time from the kill of the
	// primary to the first write acknowledged after it.
	Pause time.Duration
	// Promoted, for a failover: from the kill to the return of keyway's failover call (the promotion done, the
	// group following the new primary). Pause less Promoted is what writes took to resume after it.
	Promoted time.Duration `json:",omitempty"`
	Acked    int           // rows keyway acknowledged in the part
	Errors   int           // writes that failed
	Lost     int           // acknowledged rows the new primary does not have
}

// promotions runs part 3 on repl with keyway binary bin.
func (e *replicasEnv) promotions(ctx context.Context, bin string) (*Promotions, error) {
	p := e.repl.Primary
	pdb, err := sql.Open("mysql", p.AppDSN)
	if err != nil {
		return nil, err
	}
	_, err = pdb.ExecContext(ctx, "CREATE TABLE promo (w INT, n INT, PRIMARY KEY (w, n))")
	pdb.Close()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var replicas []string
	for _, r := range e.repl.Replicas {
		replicas = append(replicas, r.Addr)
	}
	cfg, err := writeKeywaySQLConfig(p.Addr, false, keywayLimits{replicas: replicas, readFrom: "replicas"})
	if err != nil {
		return nil, err
	}
	defer os.Remove(cfg)
	port, err := peers.FreePort()
	if err != nil {
		return nil, err
	}
	admin := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	kw, err := keywaySQLStarter(kwReplicasTarget, bin, cfg, "--admin-listen", admin).start(ctx)
	if err != nil {
		return nil, err
	}
	defer kw.stop()
	time.Sleep(replicasSettle)
	db, err := sql.Open("mysql", sqlUser+":"+sqlPassword+"@tcp("+kw.addr+")/test")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	out := &Promotions{Writers: e.o.Writers, Replicated: "asynchronous"}

	// Switchover: the longest write while it runs.
	w := startPromoWriters(db, e.o.Writers, 0)
	time.Sleep(time.Second)
	report, err := promote(ctx, admin, "switchover")
	time.Sleep(time.Second)
	acked := w.stop()
	if err != nil {
		return nil, fmt.Errorf("bench: switchover: %w", err)
	}
	out.Switchover = Promotion{Report: report, Pause: w.longest, Acked: len(acked), Errors: w.errors}
	newPrimary, err := currentPrimary(ctx, e.repl)
	if err != nil {
		return nil, err
	}
	if out.Switchover.Lost, err = lost(ctx, newPrimary, acked); err != nil {
		return nil, err
	}

	if out.Failover, err = failover(ctx, e.repl, newPrimary, db, admin, e.o.Writers, 1_000_000); err != nil {
		return nil, err
	}
	fmt.Fprintf(e.o.Out, "replicas bench 3/3: the failover again, with semi-synchronous replication\n")
	if p, err := e.semiSyncFailover(ctx, bin); err != nil {
		out.SemiSyncNote = "failover with semi-synchronous replication: not measured: " + err.Error()
		fmt.Fprintln(e.o.Out, out.SemiSyncNote)
	} else {
		out.SemiSyncFailover = &p
	}
	return out, nil
}

// failover kills primary (-9) under writers that insert through keyway at db, asks keyway's admin listener for a
// failover, and measures it: the first write acknowledged after the kill, the failed writes, and the acknowledged
// rows the new primary lacks. Each writer numbers its rows from base up.
func failover(ctx context.Context, repl *peers.Replication, primary *peers.MariaDB, db *sql.DB, admin string, writers, base int) (Promotion, error) {
	w := startPromoWriters(db, writers, base)
	time.Sleep(time.Second)
	killed := time.Now()
	if err := primary.Kill(); err != nil {
		w.stop()
		return Promotion{}, err
	}
	w.since(killed)
	report, err := promote(ctx, admin, "failover")
	promoted := time.Since(killed)
	time.Sleep(time.Second)
	acked := w.stop()
	if err != nil {
		return Promotion{}, fmt.Errorf("bench: failover: %w", err)
	}
	out := Promotion{Report: report, Pause: w.firstAfter, Promoted: promoted, Acked: len(acked), Errors: w.errors}
	newPrimary, err := currentPrimary(ctx, repl)
	if err != nil {
		return Promotion{}, err
	}
	if out.Lost, err = lost(ctx, newPrimary, acked); err != nil {
		return Promotion{}, err
	}
	return out, nil
}

// semiSyncFailover starts a primary and two replicas that replicate semi-synchronously (AFTER_SYNC), and a keyway
// in front of them, and measures a failover under the writers there.
func (e *replicasEnv) semiSyncFailover(ctx context.Context, bin string) (Promotion, error) {
	repl, err := peers.StartReplication(ctx, peers.ReplicationOptions{SemiSync: true})
	if err != nil {
		return Promotion{}, fmt.Errorf("bench: %w", err)
	}
	defer repl.Stop()
	pdb, err := sql.Open("mysql", repl.Primary.AppDSN)
	if err != nil {
		return Promotion{}, err
	}
	_, err = pdb.ExecContext(ctx, "CREATE TABLE promo (w INT, n INT, PRIMARY KEY (w, n))")
	pdb.Close()
	if err != nil {
		return Promotion{}, fmt.Errorf("bench: %w", err)
	}
	if err := repl.Sync(ctx, prepareTimeout); err != nil {
		return Promotion{}, fmt.Errorf("bench: %w", err)
	}
	var replicas []string
	for _, r := range repl.Replicas {
		replicas = append(replicas, r.Addr)
	}
	cfg, err := writeKeywaySQLConfig(repl.Primary.Addr, false, keywayLimits{replicas: replicas, readFrom: "replicas"})
	if err != nil {
		return Promotion{}, err
	}
	defer os.Remove(cfg)
	port, err := peers.FreePort()
	if err != nil {
		return Promotion{}, err
	}
	admin := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	kw, err := keywaySQLStarter(kwReplicasTarget, bin, cfg, "--admin-listen", admin).start(ctx)
	if err != nil {
		return Promotion{}, err
	}
	defer kw.stop()
	time.Sleep(replicasSettle)
	db, err := sql.Open("mysql", sqlUser+":"+sqlPassword+"@tcp("+kw.addr+")/test")
	if err != nil {
		return Promotion{}, err
	}
	defer db.Close()
	return failover(ctx, repl, repl.Primary, db, admin, e.o.Writers, 0)
}

// promote asks keyway's admin listener for a switchover or a failover of group main and returns its report.
func promote(ctx context.Context, admin, op string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+admin+"/groups/main/"+op, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), nil
}

// currentPrimary is the running member that is writable and replicates from no one.
func currentPrimary(ctx context.Context, r *peers.Replication) (*peers.MariaDB, error) {
	for _, m := range r.Members() {
		if !m.Running() {
			continue
		}
		st, err := m.SlaveStatus(ctx)
		if err == nil && st == nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("bench: no member is a primary")
}

// lost counts the rows of acked that m does not have.
func lost(ctx context.Context, m *peers.MariaDB, acked [][2]int) (int, error) {
	db, err := sql.Open("mysql", m.AppDSN)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	have := map[[2]int]bool{}
	rows, err := db.QueryContext(ctx, "SELECT w, n FROM promo")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var k [2]int
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			return 0, err
		}
		have[k] = true
	}
	n := 0
	for _, k := range acked {
		if !have[k] {
			n++
		}
	}
	return n, rows.Err()
}

// promoWriters insert (w, n) rows through keyway, each writer its own n from base up, and remember what was
// acknowledged, the longest write, and the first write acknowledged after an instant.
type promoWriters struct {
	mu         sync.Mutex
	acked      [][2]int
	errors     int
	longest    time.Duration
	after      time.Time
	firstAfter time.Duration
	done       chan struct{}
	wg         sync.WaitGroup
}

func startPromoWriters(db *sql.DB, writers, base int) *promoWriters {
	p := &promoWriters{done: make(chan struct{})}
	for w := range writers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for n := base + 1; ; n++ {
				select {
				case <-p.done:
					return
				default:
				}
				start := time.Now()
				_, err := db.Exec("INSERT INTO promo VALUES (?, ?)", w, n)
				end := time.Now()
				p.mu.Lock()
				if err != nil {
					p.errors++
				} else {
					p.acked = append(p.acked, [2]int{w, n})
					p.longest = max(p.longest, end.Sub(start))
					if !p.after.IsZero() && p.firstAfter == 0 && start.After(p.after) {
						p.firstAfter = end.Sub(p.after)
					}
				}
				p.mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return p
}

// since starts watching for the first write begun after t and acknowledged.
func (p *promoWriters) since(t time.Time) {
	p.mu.Lock()
	p.after = t
	p.mu.Unlock()
}

// stop ends the writers and returns the rows acknowledged.
func (p *promoWriters) stop() [][2]int {
	close(p.done)
	p.wg.Wait()
	return p.acked
}

// writeText prints part 3.
func (p *Promotions) writeText(w io.Writer) {
	fmt.Fprintf(w, "failover and switchover: %d writers inserting through keyway (go-sql-driver), %s replication\n", p.Writers, p.Replicated)
	fmt.Fprintf(w, "%-11s %8s %8s %6s %-40s\n", "", "acked", "errors", "lost", "pause")
	fmt.Fprintf(w, "%-11s %8d %8d %6d %-40s\n", "switchover", p.Switchover.Acked, p.Switchover.Errors, p.Switchover.Lost,
		"longest write "+p.Switchover.Pause.Round(time.Millisecond).String())
	fmt.Fprintf(w, "%-11s %8d %8d %6d %-40s\n", "failover", p.Failover.Acked, p.Failover.Errors, p.Failover.Lost, failoverPause(p.Failover))
	if s := p.SemiSyncFailover; s != nil {
		fmt.Fprintf(w, "%-11s %8d %8d %6d %-40s\n", "failover*", s.Acked, s.Errors, s.Lost, failoverPause(*s))
		fmt.Fprintf(w, "  * on another primary and two replicas, with semi-synchronous replication (AFTER_SYNC): lost must be 0\n")
	}
	fmt.Fprintf(w, "  switchover report: %s", p.Switchover.Report)
	fmt.Fprintf(w, "  failover report: %s", p.Failover.Report)
	if s := p.SemiSyncFailover; s != nil {
		fmt.Fprintf(w, "  semi-synchronous failover report: %s", s.Report)
	}
	if p.SemiSyncNote != "" {
		fmt.Fprintln(w, p.SemiSyncNote)
	}
}

// failoverPause describes a failover's pause: kill to the first write acknowledged, and kill to the end of keyway's
// failover call (the promotion), where measured.
func failoverPause(p Promotion) string {
	out := "kill to first write acknowledged " + p.Pause.Round(time.Millisecond).String()
	if p.Promoted > 0 {
		out += " (failover call done " + p.Promoted.Round(time.Millisecond).String() + " after the kill)"
	}
	return out
}

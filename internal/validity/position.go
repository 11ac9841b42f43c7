package validity

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// GTID is one MariaDB global transaction ID: Domain-Server-Seq. Within a replication domain sequence numbers only
// grow, across failovers too, so positions compare Seq per Domain; Server is kept only so that a Position prints
// as MariaDB does (and MASTER_GTID_WAIT accepts it).
type GTID struct {
	Domain uint32
	Server uint32
	Seq    uint64
}

// Position is a MariaDB GTID position: per replication domain, the GTID with the highest sequence number. The zero
// Position has no domain: nothing is needed. A Position is a value: its GTIDs are never changed once it is made,
// so it may be copied and shared freely (Merge returns one of its inputs when that one covers the other).
type Position struct {
	gtids []GTID // sorted by Domain, one per domain
}

// ParsePosition reads a position as MariaDB prints it in gtid_binlog_pos, gtid_slave_pos, gtid_current_pos and the
// session-tracked last_gtid: "0-1-100,1-2-7", domains in any order, blanks around each GTID ignored; "" is the zero
// Position. A domain named twice is an error, as it is to MariaDB.
func ParsePosition(s string) (Position, error) {
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) != "" {
			n++
		}
	}
	if n == 0 {
		return Position{}, nil
	}
	gtids := make([]GTID, 0, n)
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		g, err := parseGTID(part)
		if err != nil {
			return Position{}, fmt.Errorf("GTID position %q: %w", s, err)
		}
		// Insert in domain order: positions hold a handful of domains at most.
		i := len(gtids)
		for i > 0 && gtids[i-1].Domain > g.Domain {
			i--
		}
		if i > 0 && gtids[i-1].Domain == g.Domain {
			return Position{}, fmt.Errorf("GTID position %q: domain %d appears twice", s, g.Domain)
		}
		gtids = append(gtids, GTID{})
		copy(gtids[i+1:], gtids[i:])
		gtids[i] = g
	}
	return Position{gtids: gtids}, nil
}

var errGTIDSyntax = errors.New("a GTID is domain-server-sequence, three unsigned decimal numbers")

// parseGTID reads "domain-server-seq".
func parseGTID(s string) (GTID, error) {
	d, rest, ok1 := strings.Cut(s, "-")
	sv, seq, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 {
		return GTID{}, errGTIDSyntax
	}
	domain, err1 := parseDecimal(d, 32)
	server, err2 := parseDecimal(sv, 32)
	n, err3 := parseDecimal(seq, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return GTID{}, err
	}
	return GTID{Domain: uint32(domain), Server: uint32(server), Seq: n}, nil
}

// parseDecimal reads digits only (no sign, no blank, no base prefix; strconv alone would take "+1" as well).
func parseDecimal(s string, bits int) (uint64, error) {
	if s == "" {
		return 0, errGTIDSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errGTIDSyntax
		}
	}
	n, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return n, nil
}

// PositionOf is the position of one GTID (a commit's).
func PositionOf(g GTID) Position { return Position{gtids: []GTID{g}} }

// String prints the position as MariaDB does: "domain-server-seq" per domain, in domain order, comma-separated;
// "" for the zero Position. ParsePosition reads it back.
func (p Position) String() string {
	var b []byte
	for i, g := range p.gtids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(g.Domain), 10)
		b = append(b, '-')
		b = strconv.AppendUint(b, uint64(g.Server), 10)
		b = append(b, '-')
		b = strconv.AppendUint(b, g.Seq, 10)
	}
	return string(b)
}

// IsZero reports whether the position names no domain.
func (p Position) IsZero() bool { return len(p.gtids) == 0 }

// GTIDs are the position's GTIDs, one per domain, in domain order. The slice is the position's own: do not change it.
func (p Position) GTIDs() []GTID { return p.gtids }

// Seq is the position's sequence number in domain (0 when it does not name the domain).
func (p Position) Seq(domain uint32) uint64 {
	for _, g := range p.gtids {
		if g.Domain == domain {
			return g.Seq
		}
	}
	return 0
}

// Equal reports whether p and q name the same GTIDs.
func (p Position) Equal(q Position) bool {
	if len(p.gtids) != len(q.gtids) {
		return false
	}
	for i := range p.gtids {
		if p.gtids[i] != q.gtids[i] {
			return false
		}
	}
	return true
}

// Covers reports whether p is at or after need: in every domain of need, p's sequence number is at least need's (a
// domain p does not name counts as 0). A replica whose applied position covers need has applied every commit need
// stands for. The server ids are not compared.
func (p Position) Covers(need Position) bool {
	i := 0
	for _, n := range need.gtids {
		for i < len(p.gtids) && p.gtids[i].Domain < n.Domain {
			i++
		}
		have := uint64(0)
		if i < len(p.gtids) && p.gtids[i].Domain == n.Domain {
			have = p.gtids[i].Seq
		}
		if have < n.Seq {
			return false
		}
	}
	return true
}

// Merge is the position at or after both p and q: per domain, the GTID with the higher sequence number (p's on a
// tie). p and q are not changed; when one covers the other, that one is returned, and nothing is allocated.
func (p Position) Merge(q Position) Position {
	if p.Covers(q) {
		return p
	}
	if q.Covers(p) {
		return q
	}
	out := make([]GTID, 0, len(p.gtids)+len(q.gtids))
	i, j := 0, 0
	for i < len(p.gtids) || j < len(q.gtids) {
		switch {
		case j == len(q.gtids) || i < len(p.gtids) && p.gtids[i].Domain < q.gtids[j].Domain:
			out = append(out, p.gtids[i])
			i++
		case i == len(p.gtids) || q.gtids[j].Domain < p.gtids[i].Domain:
			out = append(out, q.gtids[j])
			j++
		default: // the same domain
			g := p.gtids[i]
			if q.gtids[j].Seq > g.Seq {
				g = q.gtids[j]
			}
			out = append(out, g)
			i++
			j++
		}
	}
	return Position{gtids: out}
}

// positions are one group's per-table positions (see Gate.NoteCommit): the GTID of the last commit that changed
// each table that keyway knows of. They are positions of one group's servers only: GTIDs of two groups are never
// compared, so they live on the group's Gate and not on Table, which all groups share.
type positions struct {
	mu     sync.RWMutex
	tables map[TableID]Position // tables named with their schema
	// unqualified are commits noted for an ID without schema (a write whose default database was not known): a
	// table of that name in any schema needs them. Almost always empty.
	unqualified map[string]Position
	// byName merges the positions of every table of a name, in any schema: what an ID without schema needs.
	byName map[string]Position
	// floor is what a table nothing was noted for needs (NoteAll): every entry of the maps is at or after it.
	floor  Position
	newest Position
}

// NoteCommit records a commit at pos that changed the tables ids (none: a commit whose tables keyway cannot name,
// or that changed none): each table's position, and the group's newest (Newest), rise to pos in pos's domains and
// never go back. An ID without schema raises the table of that name in every schema. Note a commit before its
// invalidations are applied (see the package comment: a stamp taken after them must find the position noted). A nil
// Gate notes nothing.
func (g *Gate) NoteCommit(ids []TableID, pos Position) {
	if g == nil || pos.IsZero() {
		return
	}
	p := &g.pos
	p.mu.Lock()
	defer p.mu.Unlock()
	p.newest = p.newest.Merge(pos)
	if len(ids) == 0 {
		return
	}
	if p.tables == nil {
		p.tables, p.byName = map[TableID]Position{}, map[string]Position{}
	}
	for _, id := range ids {
		if id.Schema == "" {
			if p.unqualified == nil {
				p.unqualified = map[string]Position{}
			}
			p.unqualified[id.Name] = p.notedOr(p.unqualified, id.Name).Merge(pos)
		} else if old, ok := p.tables[id]; !ok || !old.Covers(pos) {
			if !ok {
				old = p.floor
			}
			p.tables[id] = old.Merge(pos)
		}
		p.byName[id.Name] = p.notedOr(p.byName, id.Name).Merge(pos)
	}
}

// notedOr is m[name], or the floor when m has no entry.
func (p *positions) notedOr(m map[string]Position, name string) Position {
	if v, ok := m[name]; ok {
		return v
	}
	return p.floor
}

// NoteAll records that every table, named or not, those nothing was noted for yet included, may have changed up
// to pos: the position the binlog follower starts from (commits before it it never sees), a gap in what it saw,
// or a statement it could not name the tables of. Every Needs from now on is at or after pos.
func (g *Gate) NoteAll(pos Position) {
	if g == nil || pos.IsZero() {
		return
	}
	p := &g.pos
	p.mu.Lock()
	defer p.mu.Unlock()
	p.floor = p.floor.Merge(pos)
	p.newest = p.newest.Merge(pos)
	for _, m := range []map[string]Position{p.unqualified, p.byName} {
		for k, v := range m {
			m[k] = v.Merge(pos)
		}
	}
	for k, v := range p.tables {
		p.tables[k] = v.Merge(pos)
	}
}

// Needs is the position a read of tables ids needs a server to have applied: the merge of their positions (a table
// nothing was noted for needs only NoteAll's floor, often zero). An ID without schema needs the positions of that
// name in every schema. It allocates nothing when one table is asked, nor when one of the tables' positions covers
// the others'. A nil Gate needs nothing.
func (g *Gate) Needs(ids []TableID) Position {
	if g == nil {
		return Position{}
	}
	p := &g.pos
	p.mu.RLock()
	defer p.mu.RUnlock()
	need := p.floor
	for _, id := range ids {
		var v Position
		if id.Schema == "" {
			v = p.notedOr(p.byName, id.Name)
		} else {
			var ok bool
			if v, ok = p.tables[id]; !ok {
				v = p.floor
			}
			if len(p.unqualified) > 0 {
				v = v.Merge(p.unqualified[id.Name])
			}
		}
		need = v.Merge(need)
	}
	return need
}

// Newest is the group's newest position keyway knows of: every commit noted (NoteCommit, NoteAll) is at or before
// it. A statement whose tables keyway cannot name needs it. A nil Gate's is zero.
func (g *Gate) Newest() Position {
	if g == nil {
		return Position{}
	}
	g.pos.mu.RLock()
	defer g.pos.mu.RUnlock()
	return g.pos.newest
}

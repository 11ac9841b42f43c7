package sqlproxy

// keyway's own statements on the SQL door: SHOW KEYWAY CACHE (the caches' and followers' figures, from
// Options.CacheReport), SHOW KEYWAY CANDIDATES (the digests worth moving to the cache or the key-value path,
// from the digest statistics and the plans) and SHOW KEYWAY SESSION (this session's pin reasons, pipeline.go). The admin listener serves the candidates too (/candidates).

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
	"github.com/keywaydb/keyway/internal/shard"
)

// showKeyway recognises "SHOW KEYWAY <what>" and returns what, upper-cased.
func showKeyway(sql string) (string, bool) {
	// Every query passes here: refuse cheaply what does not start with "show ".
	t := strings.TrimLeft(sql, " \t\r\n")
	if len(t) < 11 || !strings.EqualFold(t[:5], "show ") {
		return "", false
	}
	f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(sql), ";"))
	if len(f) != 3 || !strings.EqualFold(f[0], "show") || !strings.EqualFold(f[1], "keyway") {
		return "", false
	}
	return strings.ToUpper(f[2]), true
}

// answerShowKeyway answers a SHOW KEYWAY statement from keyway itself.
func (ss *session) answerShowKeyway(what string) error {
	status := ss.status
	switch what {
	case "CACHE":
		var rows [][]*string
		if f := ss.s.opts.CacheReport; f != nil {
			for _, kv := range f() {
				rows = append(rows, []*string{&kv[0], &kv[1]})
			}
		}
		return ss.c.WriteTextResult([]string{"Name", "Value"}, rows, status)
	case "CANDIDATES":
		var rows [][]*string
		for _, c := range ss.s.Candidates() {
			vals := []string{c.Digest, c.Query, strconv.FormatInt(c.Calls, 10), strconv.FormatFloat(c.TotalMS, 'f', 1, 64),
				strconv.FormatFloat(c.Share, 'f', 3, 64), yesNo(c.KeyValue), yesNo(c.Cached), c.WhyNot}
			row := make([]*string, len(vals))
			for i := range vals {
				row[i] = &vals[i]
			}
			rows = append(rows, row)
		}
		return ss.c.WriteTextResult([]string{"Digest", "Query", "Calls", "Total_ms", "Share", "Key_value", "Cached", "Why_not"}, rows, status)
	case "SESSION":
		// This session's pin state (pipeline.go's pinTable): answered by keyway, so asking changes nothing.
		pins := ss.pins()
		pinned, why := ss.pinned()
		vals := [][2]string{{"Pinned", yesNo(pinned)}, {"Pin_reasons", pins.String()}, {"Pin_why", why},
			{"Prepared_statements", strconv.Itoa(len(ss.stmts))}}
		rows := make([][]*string, len(vals))
		for i := range vals {
			rows[i] = []*string{&vals[i][0], &vals[i][1]}
		}
		return ss.c.WriteTextResult([]string{"Name", "Value"}, rows, status)
	case "SHARDS":
		// The shard map statements are routed by now: one row per shard, then the global group; the map's version
		// in every row, so a client sees which map it read.
		m := ss.s.shardMap()
		var rows [][]*string
		if m != nil {
			version := strconv.FormatUint(m.Version, 10)
			for _, r := range m.Describe() {
				vals := append([]string{version}, r...)
				row := make([]*string, len(vals))
				for i := range vals {
					row[i] = &vals[i]
				}
				rows = append(rows, row)
			}
		}
		return ss.c.WriteTextResult(append([]string{"Version"}, shard.DescribeColumns...), rows, status)
	}
	return ss.reply(mysqlwire.NewError(mysqlwire.ERParseError, "42000", "keyway knows SHOW KEYWAY CACHE, SHOW KEYWAY CANDIDATES, SHOW KEYWAY SESSION and SHOW KEYWAY SHARDS, not %q", what))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// Candidate is a statement shape (digest) and what keyway could do for it.
type Candidate struct {
	Digest   string  `json:"digest"`
	Query    string  `json:"query"` // normalized
	Calls    int64   `json:"calls"`
	TotalMS  float64 `json:"total_ms"`
	Share    float64 `json:"share"`     // of the total time of every digest
	KeyValue bool    `json:"key_value"` // one equality on one column of one table: a key-value read or write
	Cached   bool    `json:"cached"`    // answered from the result cache when the session is unpinned
	WhyNot   string  `json:"why_not,omitempty"`
}

// maxCandidates bounds the list: the digests with the most total time.
const maxCandidates = 50

// Candidates lists the digests that read data, the most total time first: whether each is key-value shaped, is
// cached, and why not when it is not.
func (s *Server) Candidates() []Candidate {
	d := s.opts.Digests
	if d == nil {
		return nil
	}
	byDigest := map[string]*Candidate{}
	var total float64
	for _, st := range d.Snapshot() {
		ms := float64(st.AvgLatency) * float64(st.Count) / float64(time.Millisecond)
		total += ms
		c := byDigest[st.Digest]
		if c == nil {
			c = &Candidate{Digest: st.Digest, Query: st.Normalized}
			byDigest[st.Digest] = c
		}
		c.Calls += st.Count
		c.TotalMS += ms
	}
	out := make([]Candidate, 0, len(byDigest))
	for _, c := range byDigest {
		plan := s.plans.Plan(c.Query)
		if plan.Class != ClassRead && plan.Key == nil {
			continue // neither a read nor a key-value write
		}
		c.KeyValue = plan.Key != nil
		switch {
		case !plan.Cacheable:
			c.WhyNot = plan.NotCacheable
		case plan.Key == nil:
			c.WhyNot = "not a point select (one equality on one column): cached only with /*+ keyway cache */"
		case s.opts.Cache == nil:
			c.WhyNot = "the result cache is off (no binlog follower on every group, or [cache] enabled = false)"
		default:
			c.Cached = true
		}
		if total > 0 {
			c.Share = c.TotalMS / total
		}
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Candidate) int { return cmp.Compare(b.TotalMS, a.TotalMS) })
	return out[:min(len(out), maxCandidates)]
}

package memcache

import (
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"time"
)

// stats [settings|reset]: memcached's general statistics and settings, as
// "STAT name value" lines ending in END.
func (c *conn) stats(toks [][]byte) {
	w := statSink{c: c}
	if len(toks) > 1 {
		switch string(toks[1]) {
		case "settings":
			c.settingsStats(w)
			c.out = append(c.out, replyEnd...)
		case "reset":
			// Counters are cumulative since start in keyway; memcached answers RESET.
			c.out = append(c.out, "RESET\r\n"...)
		case "items", "slabs", "sizes", "conns", "extstore":
			// memcached subsystems keyway does not have: no lines.
			c.out = append(c.out, replyEnd...)
		default:
			// memcached answers an unknown statistics group (and "stats noreply") with ERROR.
			c.out = append(c.out, replyError...)
		}
		return
	}
	c.srv.generalStats(w)
	c.out = append(c.out, replyEnd...)
}

// statWriter receives statistics one by one.
type statWriter interface {
	int(name string, v int64)
	str(name, v string)
}

// Stats returns the numeric general statistics, as `stats` reports them, for
// the metrics exporter.
func (s *Server) Stats() map[string]int64 {
	m := mapSink{}
	s.generalStats(m)
	return m
}

// mapSink keeps the numeric statistics in a map.
type mapSink map[string]int64

func (m mapSink) int(name string, v int64) { m[name] = v }
func (m mapSink) str(string, string)       {}

// generalStats writes memcached's general statistics ("stats" with no group);
// the text and binary protocols share this one list.
func (s *Server) generalStats(w statWriter) {
	e := s.eng
	now := time.Now()
	st := e.Store().Stats()
	k := e.Counters()
	var ru rusage
	ru.read()
	w.int("pid", int64(os.Getpid()))
	w.int("uptime", int64(now.Sub(e.Started())/time.Second))
	w.int("time", now.Unix())
	w.str("version", s.opts.Version)
	w.str("libevent", "none")
	w.int("pointer_size", 64)
	w.str("rusage_user", ru.user)
	w.str("rusage_system", ru.system)
	w.int("max_connections", int64(s.opts.MaxConnections))
	w.int("curr_connections", s.currConns.Load())
	w.int("total_connections", s.totalConns.Load())
	w.int("rejected_connections", s.rejected.Load())
	w.int("cmd_get", k.CmdGet.Load())
	w.int("cmd_set", k.CmdSet.Load())
	w.int("cmd_flush", k.CmdFlush.Load())
	w.int("cmd_touch", k.CmdTouch.Load())
	w.int("cmd_meta", s.metaCmds.Load())
	w.int("get_hits", k.GetHits.Load())
	w.int("get_misses", k.GetMisses.Load())
	w.int("get_expired", st.Expired)
	w.int("delete_misses", k.DeleteMisses.Load())
	w.int("delete_hits", k.DeleteHits.Load())
	w.int("incr_misses", k.IncrMisses.Load())
	w.int("incr_hits", k.IncrHits.Load())
	w.int("decr_misses", k.DecrMisses.Load())
	w.int("decr_hits", k.DecrHits.Load())
	w.int("cas_misses", k.CasMisses.Load())
	w.int("cas_hits", k.CasHits.Load())
	w.int("cas_badval", k.CasBadval.Load())
	w.int("touch_hits", k.TouchHits.Load())
	w.int("touch_misses", k.TouchMisses.Load())
	w.int("auth_cmds", s.authCmds.Load())
	w.int("auth_errors", s.authErrors.Load())
	w.int("bytes_read", s.bytesRead.Load())
	w.int("bytes_written", s.bytesWritten.Load())
	w.int("limit_maxbytes", st.Limit)
	w.int("accepting_conns", s.accepting())
	// keyway never stops listening: past max_connections it accepts and
	// rejects (rejected_connections), so listening is never disabled.
	w.int("listen_disabled_num", 0)
	w.int("time_in_listen_disabled_us", 0)
	w.int("threads", int64(s.threads()))
	w.int("bytes", st.Bytes)
	w.int("curr_items", st.CurrItems)
	w.int("total_items", st.TotalItems)
	w.int("expired_unfetched", 0)
	w.int("evictions", st.Evictions)
	// keyway's store has no slabs: an expired item is removed, and a store
	// never reuses its memory as memcached's reclaim does.
	w.int("reclaimed", 0)
}

// accepting is memcached's accepting_conns: 1 while a listener is being
// served and the server is not shutting down.
func (s *Server) accepting() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed || len(s.mu.listeners) == 0 {
		return 0
	}
	return 1
}

func (s *Server) threads() int {
	if s.opts.Threads > 0 {
		return s.opts.Threads
	}
	return runtime.GOMAXPROCS(0)
}

// settingsStats writes "stats settings".
func (c *conn) settingsStats(w statSink) {
	s, e := c.srv, c.eng
	st := e.Store().Stats()
	w.int("maxbytes", st.Limit)
	w.int("maxconns", int64(s.opts.MaxConnections))
	w.int("tcpport", int64(s.port()))
	w.str("evictions", "on")
	w.str("cas_enabled", "yes")
	w.int("item_size_max", e.MaxItemSize())
	w.int("num_threads", int64(s.threads()))
	w.str("eviction_policy", "sieve")
	w.str("persistent", strconv.FormatBool(e.Store().Persistent()))
}

// statSink writes statistics in one protocol's framing: "STAT name value"
// lines for text, or for binary one stat response per statistic (key the
// name, body the value) echoing the request's opaque.
type statSink struct {
	c      *conn
	binary bool
	opaque uint32
}

func (w statSink) int(name string, v int64) {
	c := w.c
	start := w.begin(name)
	c.out = strconv.AppendInt(c.out, v, 10)
	w.end(start)
}

func (w statSink) str(name, v string) {
	c := w.c
	start := w.begin(name)
	c.out = append(c.out, v...)
	w.end(start)
}

// begin writes what comes before the value and returns where it started.
func (w statSink) begin(name string) int {
	c := w.c
	start := len(c.out)
	if w.binary {
		c.binHeader(binHeader{opcode: opStat, opaque: w.opaque}, statusOK, 0, len(name), 0, 0)
	} else {
		c.out = append(c.out, "STAT "...)
	}
	c.out = append(c.out, name...)
	if !w.binary {
		c.out = append(c.out, ' ')
	}
	return start
}

// end finishes the statistic begun at start: the line end, or the binary
// body length now that the value's length is known.
func (w statSink) end(start int) {
	c := w.c
	if w.binary {
		binary.BigEndian.PutUint32(c.out[start+8:], uint32(len(c.out)-start-binaryHeaderLen))
		return
	}
	c.out = append(c.out, "\r\n"...)
}

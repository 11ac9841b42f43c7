package memcache

import (
	"os"
	"runtime"
	"strconv"
	"time"
)

// stats [settings|reset]: memcached's general statistics and settings, as
// "STAT name value" lines ending in END.
func (c *conn) stats(toks [][]byte) {
	if len(toks) > 1 {
		switch string(toks[1]) {
		case "settings":
			c.statsSettings()
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
	s, e := c.srv, c.eng
	now := time.Now()
	st := e.Store().Stats()
	k := e.Counters()
	var ru rusage
	ru.read()
	c.statInt("pid", int64(os.Getpid()))
	c.statInt("uptime", int64(now.Sub(e.Started())/time.Second))
	c.statInt("time", now.Unix())
	c.statStr("version", Version)
	c.statStr("libevent", "none")
	c.statInt("pointer_size", 64)
	c.statStr("rusage_user", ru.user)
	c.statStr("rusage_system", ru.system)
	c.statInt("max_connections", int64(s.opts.MaxConnections))
	c.statInt("curr_connections", s.currConns.Load())
	c.statInt("total_connections", s.totalConns.Load())
	c.statInt("rejected_connections", s.rejected.Load())
	c.statInt("cmd_get", k.CmdGet.Load())
	c.statInt("cmd_set", k.CmdSet.Load())
	c.statInt("cmd_flush", k.CmdFlush.Load())
	c.statInt("cmd_touch", k.CmdTouch.Load())
	c.statInt("get_hits", k.GetHits.Load())
	c.statInt("get_misses", k.GetMisses.Load())
	c.statInt("get_expired", st.Expired)
	c.statInt("delete_misses", k.DeleteMisses.Load())
	c.statInt("delete_hits", k.DeleteHits.Load())
	c.statInt("incr_misses", k.IncrMisses.Load())
	c.statInt("incr_hits", k.IncrHits.Load())
	c.statInt("decr_misses", k.DecrMisses.Load())
	c.statInt("decr_hits", k.DecrHits.Load())
	c.statInt("cas_misses", k.CasMisses.Load())
	c.statInt("cas_hits", k.CasHits.Load())
	c.statInt("cas_badval", k.CasBadval.Load())
	c.statInt("touch_hits", k.TouchHits.Load())
	c.statInt("touch_misses", k.TouchMisses.Load())
	c.statInt("threads", int64(s.threads()))
	c.statInt("limit_maxbytes", st.Limit)
	c.statInt("bytes", st.Bytes)
	c.statInt("curr_items", st.CurrItems)
	c.statInt("total_items", st.TotalItems)
	c.statInt("evictions", st.Evictions)
	c.statInt("expired_unfetched", 0)
	c.out = append(c.out, replyEnd...)
}

func (s *Server) threads() int {
	if s.opts.Threads > 0 {
		return s.opts.Threads
	}
	return runtime.GOMAXPROCS(0)
}

func (c *conn) statsSettings() {
	s, e := c.srv, c.eng
	st := e.Store().Stats()
	c.statInt("maxbytes", st.Limit)
	c.statInt("maxconns", int64(s.opts.MaxConnections))
	c.statInt("tcpport", int64(s.port()))
	c.statStr("evictions", "on")
	c.statStr("cas_enabled", "yes")
	c.statInt("item_size_max", e.MaxItemSize())
	c.statInt("num_threads", int64(s.threads()))
	c.statStr("eviction_policy", "sieve")
	c.statStr("persistent", strconv.FormatBool(e.Store().Persistent()))
	c.out = append(c.out, replyEnd...)
}

func (c *conn) statInt(name string, v int64) {
	c.out = append(c.out, "STAT "...)
	c.out = append(c.out, name...)
	c.out = append(c.out, ' ')
	c.out = strconv.AppendInt(c.out, v, 10)
	c.out = append(c.out, "\r\n"...)
}

func (c *conn) statStr(name, v string) {
	c.out = append(c.out, "STAT "...)
	c.out = append(c.out, name...)
	c.out = append(c.out, ' ')
	c.out = append(c.out, v...)
	c.out = append(c.out, "\r\n"...)
}

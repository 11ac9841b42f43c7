package memcache

import (
	"cmp"
	"crypto/tls"
	"encoding/binary"
	"math/bits"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/keywaydb/keyway/internal/store"
)

// stats [group]: memcached's statistics, as "STAT name value" lines ending
// in END. The groups are memcached 1.6.18's: settings, reset, detail,
// conns, cachedump, and the engine's items, slabs and sizes (engineStats).
func (c *conn) stats(toks [][]byte) {
	c.publish()
	w := statSink{c: c}
	if len(toks) == 1 {
		c.srv.generalStats(w)
		c.out = append(c.out, replyEnd...)
		return
	}
	switch g := string(toks[1]); g {
	case "reset":
		c.srv.resetStats()
		c.out = append(c.out, "RESET\r\n"...)
		return
	case "detail":
		c.statsDetail(toks)
		return
	case "settings":
		c.settingsStats(w)
	case "conns":
		c.srv.connStats(w)
	case "cachedump":
		c.cachedump(toks)
		return
	case "extstore":
		// keyway has no external storage; memcached without one lists nothing.
	default:
		if !c.srv.engineStats(w, g) {
			// memcached answers an unknown group (and "stats noreply") with ERROR.
			c.out = append(c.out, replyError...)
			return
		}
	}
	c.out = append(c.out, replyEnd...)
}

// resetStats is `stats reset`: memcached zeroes its counters. keyway's
// general counters are cumulative since start (the metrics exporter reads
// them as counters), so only the per-prefix counts of `stats detail` are
// cleared, as memcached clears them.
func (s *Server) resetStats() {
	s.prefixes.reset()
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

// generalStats writes memcached's general statistics ("stats" with no
// group) in memcached 1.6.18's order; the text and binary protocols share
// this one list. Fields for machinery keyway does not have (the slab
// mover and global page pool, the segmented LRU and its maintainer, the
// hash table's expansion, the logger, response objects) are honest zeros:
// that machinery never did anything. The README lists them.
// expired_unfetched and evicted_unfetched are the store's, summed over the
// slab classes it counts items in (see engineStats).
func (s *Server) generalStats(w statWriter) {
	e := s.eng
	now := time.Now()
	st := e.StoreStats()
	k := e.Counters()
	var ru rusage
	ru.read()
	conns := s.currConns.Load()
	w.int("pid", int64(os.Getpid()))
	w.int("uptime", int64(now.Sub(e.Started())/time.Second))
	w.int("time", now.Unix())
	w.str("version", s.opts.Version)
	w.str("libevent", "none")
	w.int("pointer_size", 64)
	w.str("rusage_user", ru.user)
	w.str("rusage_system", ru.system)
	w.int("max_connections", int64(s.opts.MaxConnections))
	w.int("curr_connections", conns)
	w.int("total_connections", s.totalConns.Load())
	w.int("rejected_connections", s.rejected.Load())
	// memcached's connection structures include its listeners'.
	w.int("connection_structures", conns+int64(s.listenerCount()))
	w.int("response_obj_oom", 0)
	w.int("response_obj_count", 0)
	w.int("response_obj_bytes", 0)
	// Every connection holds one read buffer of initialReadBuffer bytes;
	// what buffers grow past that is charged to the in-flight budget.
	w.int("read_buf_count", conns)
	w.int("read_buf_bytes", conns*initialReadBuffer+s.inflight.Load())
	w.int("read_buf_bytes_free", 0)
	w.int("read_buf_oom", s.readBufOOM.Load())
	w.int("reserved_fds", 0)
	w.int("cmd_get", k.CmdGet.Load())
	w.int("cmd_set", k.CmdSet.Load())
	w.int("cmd_flush", k.CmdFlush.Load())
	w.int("cmd_touch", k.CmdTouch.Load())
	w.int("cmd_meta", s.metaCmds.Load())
	w.int("get_hits", k.GetHits.Load())
	w.int("get_misses", k.GetMisses.Load())
	w.int("get_expired", st.Expired)
	// A get of an item a flush_all removed is a plain miss in keyway: the
	// store does not tell flushed from absent.
	w.int("get_flushed", 0)
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
	w.int("store_too_large", s.tooLarge.Load())
	w.int("store_no_memory", s.noMemory.Load())
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
	w.int("conn_yields", 0)
	// The store's indexes (one a shard): their slots, as a power of two, and their size.
	w.int("hash_power_level", int64(bits.Len64(uint64(st.IndexSlots))-1))
	w.int("hash_bytes", st.IndexBytes)
	w.int("hash_is_expanding", 0)
	for _, name := range noSlabStats {
		w.int(name, 0)
	}
	w.int("bytes", st.Bytes)
	w.int("curr_items", st.CurrItems)
	w.int("total_items", st.TotalItems)
	w.int("slab_global_page_pool", 0)
	var expiredUnfetched, evictedUnfetched int64
	for _, c := range e.ClassStats() {
		expiredUnfetched += c.ExpiredUnfetched
		evictedUnfetched += c.EvictedUnfetched
	}
	w.int("expired_unfetched", expiredUnfetched)
	w.int("evicted_unfetched", evictedUnfetched)
	w.int("evicted_active", 0)
	w.int("evictions", st.Evictions)
	// keyway's store has no slabs: an expired item is removed, and a store
	// never reuses its memory as memcached's reclaim does.
	w.int("reclaimed", 0)
	for _, name := range noLRUStats {
		w.int(name, 0)
	}
}

// noSlabStats are general statistics of memcached's slab mover, LRU
// crawler and maintainer, allocator and logger, which keyway does not have.
var noSlabStats = []string{
	"slab_reassign_rescues", "slab_reassign_chunk_rescues", "slab_reassign_evictions_nomem",
	"slab_reassign_inline_reclaim", "slab_reassign_busy_items", "slab_reassign_busy_deletes",
	"slab_reassign_running", "slabs_moved", "lru_crawler_running", "lru_crawler_starts",
	"lru_maintainer_juggles", "malloc_fails", "log_worker_dropped", "log_worker_written",
	"log_watcher_skipped", "log_watcher_sent", "log_watchers", "unexpected_napi_ids",
	"round_robin_fallback",
}

// noLRUStats end the general statistics: memcached's segmented-LRU and
// crawler counters; keyway's store has one SIEVE queue and moves nothing.
var noLRUStats = []string{
	"crawler_reclaimed", "crawler_items_checked", "lrutail_reflocked", "moves_to_cold",
	"moves_to_warm", "moves_within_lru", "direct_reclaims", "lru_bumps_dropped",
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

func (s *Server) listenerCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.listeners)
}

func (s *Server) threads() int {
	if s.opts.Threads > 0 {
		return s.opts.Threads
	}
	return runtime.GOMAXPROCS(0)
}

// settingsStats writes "stats settings": every setting memcached 1.6.18
// lists, in its order (TestStatsSettingsMatchMemcached compares them), then
// keyway's own two (eviction_policy, persistent). A setting keyway has is
// its value here: the memory and item size limits, connections, port and
// interfaces, threads, stats detail, authentication and TLS. The rest are
// memcached's defaults, which describe what keyway does where it does the
// same (cas on, both protocols, evictions, flush_all and dumps allowed, an
// always-running crawler), and otherwise name machinery keyway does not
// have, switched off where a client could try to use it (slab_reassign,
// slab_automove, the LRU maintainer and segments, temp_lru, UDP, the
// shutdown command) and at memcached's default where nothing can (extstore,
// logger buffers). growth_factor, chunk_size and slab_chunk_max are the
// slab classes the store counts its items in (see engineStats).
func (c *conn) settingsStats(w statSink) {
	s, e := c.srv, c.eng
	st := e.StoreStats()
	inter, socket := s.listenAddrs()
	threads := int64(s.threads())
	w.int("maxbytes", st.Limit)
	w.int("maxconns", int64(s.opts.MaxConnections))
	w.int("tcpport", int64(s.port()))
	w.int("udpport", 0) // no UDP
	w.str("inter", inter)
	// The verbosity command is checked and ignored: keyway has no levels.
	w.int("verbosity", 0)
	// memcached's oldest_live is in its own relative clock; keyway's
	// delayed flush_all deadline is not reported.
	w.int("oldest", 0)
	w.str("evictions", "on")
	w.str("domain_socket", socket)
	w.str("umask", "700")
	w.str("shutdown_command", "no")
	w.str("growth_factor", "1.25")
	w.int("chunk_size", 48)
	w.int("num_threads", threads)
	w.int("num_threads_per_udp", threads)
	w.str("stat_key_prefix", string(rune(prefixDelimiter)))
	w.str("detail_enabled", yesNo(s.prefixes.on.Load()))
	w.int("reqs_per_event", 20)
	w.str("cas_enabled", "yes")
	w.int("tcp_backlog", listenBacklog())
	// The first byte of a connection picks text or binary, as memcached's
	// default does.
	w.str("binding_protocol", "auto-negotiate")
	w.str("auth_enabled_sasl", yesNo(s.auth != nil))
	// The text protocol's "set" authentication (memcached's -Y) checks the
	// same users.
	w.str("auth_enabled_ascii", yesNo(s.auth != nil))
	w.int("item_size_max", e.MaxItemSize())
	// Past maxconns a connection is accepted and told so, then closed.
	w.str("maxconns_fast", "yes")
	w.int("hashpower_init", 0)
	w.str("slab_reassign", "no")
	w.int("slab_automove", 0)
	w.str("slab_automove_ratio", "0.80")
	w.int("slab_automove_window", 30)
	w.int("slab_chunk_max", store.ClassChunkSize(store.NumClasses))
	w.str("lru_crawler", "yes")
	w.int("lru_crawler_sleep", 100)
	w.int("lru_crawler_tocrawl", 0)
	w.int("tail_repair_time", 0)
	w.str("flush_enabled", "yes")
	w.str("dump_enabled", "yes")
	// Keys are spread over the store's shards by xxHash64.
	w.str("hash_algorithm", "xxhash64")
	w.str("lru_maintainer_thread", "no")
	w.str("lru_segmented", "no")
	w.int("hot_lru_pct", 20)
	w.int("warm_lru_pct", 40)
	w.str("hot_max_factor", "0.20")
	w.str("warm_max_factor", "2.00")
	w.str("temp_lru", "no")
	w.int("temporary_ttl", 61)
	w.int("idle_timeout", 0)
	w.int("watcher_logbuf_size", 262144)
	w.int("worker_logbuf_size", 65536)
	// What read buffers may grow to, all connections together, past their
	// first 4 KiB (Options.MaxInflightBytes).
	w.int("read_buf_mem_limit", s.opts.MaxInflightBytes)
	w.str("track_sizes", "no")
	w.str("inline_ascii_response", "no")
	for _, kv := range extstoreSettings {
		w.str(kv[0], kv[1])
	}
	tlsSettings(w, s.opts.TLS)
	w.str("num_napi_ids", "(null)")
	w.str("memory_file", "(null)")
	w.str("eviction_policy", "sieve")
	w.str("persistent", strconv.FormatBool(e.Persistent()))
}

// extstoreSettings are memcached's external storage settings at their
// defaults (keyway has no extstore; its persistence is the data_dir).
var extstoreSettings = [][2]string{
	{"ext_item_size", "512"}, {"ext_item_age", "4294967295"}, {"ext_low_ttl", "0"},
	{"ext_recache_rate", "2000"}, {"ext_wbuf_size", "4194304"}, {"ext_compact_under", "0"},
	{"ext_drop_under", "0"}, {"ext_max_sleep", "1000000"}, {"ext_max_frag", "0.80"},
	{"slab_automove_freeratio", "0.010"}, {"ext_drop_unread", "no"},
}

// tlsSettings writes memcached's ssl_* settings for the door's TLS
// configuration (nil: off). The certificate and key files are the
// server's business; the door sees only their contents, so it names none.
func tlsSettings(w statSink, cfg *tls.Config) {
	verify, minVersion := 0, "tlsv1.2" // Go's server default minimum
	if cfg != nil {
		switch cfg.ClientAuth {
		case tls.RequestClientCert, tls.VerifyClientCertIfGiven:
			verify = 1 // memcached's SSL_VERIFY_PEER
		case tls.RequireAnyClientCert, tls.RequireAndVerifyClientCert:
			verify = 2 // and SSL_VERIFY_FAIL_IF_NO_PEER_CERT
		}
		switch cfg.MinVersion {
		case tls.VersionTLS10:
			minVersion = "tlsv1.0"
		case tls.VersionTLS11:
			minVersion = "tlsv1.1"
		case tls.VersionTLS13:
			minVersion = "tlsv1.3"
		}
	}
	w.str("ssl_enabled", yesNo(cfg != nil))
	w.str("ssl_chain_cert", "(null)")
	w.str("ssl_key", "(null)")
	w.int("ssl_verify_mode", int64(verify))
	w.int("ssl_keyformat", 1) // PEM
	w.str("ssl_ciphers", "NULL")
	w.str("ssl_ca_cert", "NULL")
	w.int("ssl_wbuf_size", 16384)
	w.str("ssl_session_cache", "no")
	w.str("ssl_kernel_tls", "no")
	w.str("ssl_min_version", minVersion)
}

// listenAddrs returns the door's TCP interfaces, comma-separated in the
// order they opened (memcached's inter: its -l), and its Unix socket's
// path (domain_socket); "NULL" for none, as memcached.
func (s *Server) listenAddrs() (inter, socket string) {
	type l struct {
		id   uint64
		addr net.Addr
	}
	var ls []l
	s.mu.Lock()
	for ln, li := range s.mu.listeners {
		ls = append(ls, l{li.id, ln.Addr()})
	}
	s.mu.Unlock()
	slices.SortFunc(ls, func(a, b l) int { return cmp.Compare(a.id, b.id) })
	var hosts []string
	socket = "NULL"
	for _, x := range ls {
		switch a := x.addr.(type) {
		case *net.TCPAddr:
			hosts = append(hosts, a.IP.String())
		case *net.UnixAddr:
			socket = a.Name
		}
	}
	if len(hosts) == 0 {
		return "NULL", socket
	}
	return strings.Join(hosts, ","), socket
}

// listenBacklog is the backlog Go's listeners ask for (memcached's
// tcp_backlog, its -b): the kernel's somaxconn, or SOMAXCONN where the
// kernel does not say (net.maxListenerBacklog; 128 on Linux).
func listenBacklog() int64 {
	b, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		return 128
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 {
		return 128
	}
	return n
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
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

// engineStats writes memcached's engine groups (items, slabs, sizes) and
// reports whether group is one of them.
//
// keyway's store has no slab classes, but it counts its items by the class
// memcached 1.6 would store each in (store.Class: memcached's default
// geometry, chunks from 96 bytes growing by 1.25 to 512 KiB), so `stats
// items` and `stats slabs` list the classes memcached would, with the items
// memcached would have in them, and a client that reads items:N:* for the
// class of its items' size finds them. A class is listed while it holds
// items. Per class, the counts of items and what the store charges for
// them are real, and so are evictions, by class; the command counters are
// not kept per class (that would cost every request): they are in `stats`.
func (s *Server) engineStats(w statWriter, group string) bool {
	switch group {
	case "items":
		s.itemStats(w)
	case "slabs":
		s.slabStats(w)
	case "sizes":
		// keyway keeps no histogram of item sizes; memcached without
		// one (its default) answers the same.
		w.str("sizes_status", "disabled")
	default:
		return false
	}
	return true
}

// slabStats writes stats slabs: each class's chunk size and chunks per
// 1 MiB page are memcached's, and its pages are those memcached would need
// for the class's items, an item taking one chunk; the per-class command
// counters are zeros (see engineStats). total_malloced is the store's
// memory high-water mark (store.Stats.Malloced: never above
// limit_maxbytes, level while items are replaced within memory already
// used, kept by flush_all, lowered by cache_memlimit), as memcached's slab
// pages are allocated once and kept.
func (s *Server) slabStats(w statWriter) {
	classes := s.eng.ClassStats()
	active := int64(0)
	for i := range classes {
		n := classes[i].Items
		if n == 0 {
			continue
		}
		active++
		id := i + 1
		size := store.ClassChunkSize(id)
		perPage := store.SlabPageSize / size
		pages := (n + perPage - 1) / perPage
		p := strconv.Itoa(id) + ":"
		w.int(p+"chunk_size", size)
		w.int(p+"chunks_per_page", perPage)
		w.int(p+"total_pages", pages)
		w.int(p+"total_chunks", pages*perPage)
		w.int(p+"used_chunks", n)
		w.int(p+"free_chunks", pages*perPage-n)
		w.int(p+"free_chunks_end", 0)
		for _, name := range slabCommandStats {
			w.int(p+name, 0)
		}
	}
	w.int("active_slabs", active)
	w.int("total_malloced", s.eng.StoreStats().Malloced)
}

// slabCommandStats are memcached's per-class command counters; keyway
// counts commands once, in stats (get_hits, cmd_set, …).
var slabCommandStats = []string{"get_hits", "cmd_set", "delete_hits", "incr_hits", "decr_hits",
	"cas_hits", "cas_badval", "touch_hits"}

// itemStats writes stats items for each class holding items (see
// engineStats). keyway's store keeps one SIEVE queue per shard, not
// memcached's hot, warm and cold segments per class: every item counts as
// cold (the segment memcached evicts from), and age, the seconds since the
// last access of the oldest item at the end of a queue, is the same for
// every class. number, mem_requested (the bytes the store charges) and
// the evicted_* and expired_unfetched counters are the class's own; hits
// are not counted per class, and the counters of machinery keyway does
// not have are zeros.
func (s *Server) itemStats(w statWriter) {
	st := s.eng.StoreStats()
	if st.CurrItems == 0 {
		return
	}
	classes := s.eng.ClassStats()
	age := int64(0)
	if st.TailAccess > 0 {
		age = max(0, s.eng.Now()-st.TailAccess)
	}
	for i := range classes {
		c := &classes[i]
		if c.Items == 0 {
			continue
		}
		p := "items:" + strconv.Itoa(i+1) + ":"
		w.int(p+"number", c.Items)
		w.int(p+"number_hot", 0)
		w.int(p+"number_warm", 0)
		w.int(p+"number_cold", c.Items)
		w.int(p+"age_hot", 0)
		w.int(p+"age_warm", 0)
		w.int(p+"age", age)
		w.int(p+"mem_requested", c.Bytes)
		w.int(p+"evicted", c.Evicted)
		w.int(p+"evicted_nonzero", c.EvictedNonzero)
		w.int(p+"evicted_time", c.EvictedTime)
		w.int(p+"outofmemory", 0)
		w.int(p+"tailrepairs", 0)
		w.int(p+"reclaimed", 0)
		w.int(p+"expired_unfetched", c.ExpiredUnfetched)
		w.int(p+"evicted_unfetched", c.EvictedUnfetched)
		for _, name := range []string{"evicted_active", "crawler_reclaimed", "crawler_items_checked",
			"lrutail_reflocked", "moves_to_cold", "moves_to_warm", "moves_within_lru", "direct_reclaims",
			"hits_to_hot", "hits_to_warm", "hits_to_cold", "hits_to_temp"} {
			w.int(p+name, 0)
		}
	}
}

// connStats writes stats conns: each listener, then each client
// connection, numbered in the order they opened (memcached numbers them by
// file descriptor), with its address, state and the seconds since its last
// request.
func (s *Server) connStats(w statWriter) {
	type line struct {
		id               uint64
		addr, listenAddr string
		state            string
		since            int64
	}
	var lines []line
	s.mu.Lock()
	for ln, li := range s.mu.listeners {
		lines = append(lines, line{id: li.id, addr: addrName(ln.Addr()), state: "conn_listening", since: li.since})
	}
	for c := range s.mu.conns {
		lines = append(lines, line{id: c.id, addr: addrName(c.remote), listenAddr: addrName(c.listenAddr),
			state: stateNames[c.state.Load()], since: c.lastCmd.Load()})
	}
	s.mu.Unlock()
	slices.SortFunc(lines, func(a, b line) int { return cmp.Compare(a.id, b.id) })
	now := time.Now().Unix()
	for _, l := range lines {
		p := strconv.FormatUint(l.id, 10) + ":"
		w.str(p+"addr", l.addr)
		if l.listenAddr != "" {
			w.str(p+"listen_addr", l.listenAddr)
		}
		w.str(p+"state", l.state)
		w.int(p+"secs_since_last_cmd", max(0, now-l.since))
	}
}

// addrName writes an address as memcached does: "tcp:" and host:port
// (TLS listeners too; memcached names the transport, not the encryption).
func addrName(a net.Addr) string {
	if a == nil {
		return ""
	}
	if a.Network() == "unix" {
		return "unix:" + a.String()
	}
	return "tcp:" + a.String()
}

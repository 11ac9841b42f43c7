package memcache

import (
	"bytes"
	"math"
	"strconv"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
)

// Text protocol, as memcached 1.6's doc/protocol.txt and proto_text.c: a
// command line of space-separated tokens ending in "\r\n" (a bare "\n" is
// accepted), followed for storage commands by a data block of the announced
// length and "\r\n".

// maxTokens is memcached's MAX_TOKENS: longer lines (other than multi-key
// retrievals) are malformed.
const maxTokens = 24

const (
	replyError           = "ERROR\r\n"
	replyStored          = "STORED\r\n"
	replyNotStored       = "NOT_STORED\r\n"
	replyExists          = "EXISTS\r\n"
	replyNotFound        = "NOT_FOUND\r\n"
	replyDeleted         = "DELETED\r\n"
	replyTouched         = "TOUCHED\r\n"
	replyEnd             = "END\r\n"
	replyOK              = "OK\r\n"
	replyBadFormat       = "CLIENT_ERROR bad command line format\r\n"
	replyBadChunk        = "CLIENT_ERROR bad data chunk\r\n"
	replyLineTooLong     = "CLIENT_ERROR line too long\r\n"
	replyTooLarge        = "SERVER_ERROR object too large for cache\r\n"
	replyNoMemory        = "SERVER_ERROR out of memory storing object\r\n"
	replyNoMemoryReading = "SERVER_ERROR out of memory reading request\r\n"
	replyNonNumeric      = "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
	replyBadDelta        = "CLIENT_ERROR invalid numeric delta argument\r\n"
	replyBadExptime      = "CLIENT_ERROR invalid exptime argument\r\n"
	replyDeleteUsage     = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
	replyUnknownCommand  = replyError
)

// textRequest answers one text request at the start of buf and returns the
// bytes it used, or needMore.
func (c *conn) textRequest(buf []byte) (int, error) {
	if !c.authed {
		return c.textAuth(buf)
	}
	eol := bytes.IndexByte(buf, '\n')
	if eol < 0 {
		return c.unfinishedLine(buf)
	}
	line := buf[:eol]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	rest := buf[eol+1:]
	// memcached reads the line as a C string: a NUL ends it, so "set a\0b 0 0 1"
	// is "set a", an incomplete command.
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	// Leading spaces are not part of the command (" get k" is a get).
	line = bytes.TrimLeft(line, " ")
	if isRetrieval(line) {
		c.retrieval(line)
		return eol + 1, nil
	}
	toks := tokenize(line, c.toks[:0])
	if toks == nil {
		c.out = append(c.out, replyError...)
		return eol + 1, nil
	}
	c.head = eol + 1
	n := c.command(toks, rest)
	if n == needMore {
		c.need += eol + 1
		return needMore, nil
	}
	return eol + 1 + n, nil
}

// unfinishedLine decides on a line whose end has not arrived: it may grow
// up to maxLine, and up to maxGetLine if it is a get or gets (multi-key
// gets are long). Past that memcached closes the connection without a word,
// and so does keyway, except past maxGetLine, keyway's own limit, which it
// names before closing.
func (c *conn) unfinishedLine(buf []byte) (int, error) {
	if len(buf) > maxLine {
		if !mayBeLongGet(buf) {
			c.closeAfterWrite = true
			return len(buf), nil
		}
		if len(buf) > maxGetLine {
			c.out = append(c.out, replyLineTooLong...)
			c.closeAfterWrite = true
			return len(buf), nil
		}
	}
	c.need = len(buf) + 1
	return needMore, nil
}

// mayBeLongGet reports whether an unfinished line is one memcached lets grow
// past maxLine: get or gets after at most 100 spaces.
func mayBeLongGet(buf []byte) bool {
	cmd := bytes.TrimLeft(buf, " ")
	return len(buf)-len(cmd) <= 100 && (hasWord(cmd, "get") || hasWord(cmd, "gets"))
}

// tokenize splits line on spaces, skipping empty tokens. It returns nil when
// the line has more than maxTokens tokens, and an empty slice for a blank line.
func tokenize(line []byte, toks [][]byte) [][]byte {
	toks = toks[:0]
	start := -1
	for i, b := range line {
		if b == ' ' {
			if start >= 0 {
				if len(toks) == maxTokens {
					return nil
				}
				toks = append(toks, line[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		if len(toks) == maxTokens {
			return nil
		}
		toks = append(toks, line[start:])
	}
	return toks
}

func isRetrieval(line []byte) bool {
	return hasWord(line, "get") || hasWord(line, "gets") || hasWord(line, "gat") || hasWord(line, "gats")
}

func hasWord(line []byte, w string) bool {
	return len(line) > len(w) && string(line[:len(w)]) == w && line[len(w)] == ' '
}

// validKey applies memcached's text-protocol limit: 1..250 bytes. Spaces and
// newlines cannot occur (they end the token); other control characters are
// accepted because memcached 1.6 accepts them and real clients (memcaslap) send them.
func validKey(k []byte) bool {
	return len(k) > 0 && len(k) <= maxKeyLen
}

// command answers a non-retrieval command; rest is the input after its line.
// It returns how much of rest it used, or needMore.
func (c *conn) command(toks [][]byte, rest []byte) int {
	if len(toks) == 0 {
		c.out = append(c.out, replyError...)
		return 0
	}
	switch string(toks[0]) {
	case "set":
		return c.storage(engine.Set, toks, rest)
	case "add":
		return c.storage(engine.Add, toks, rest)
	case "replace":
		return c.storage(engine.Replace, toks, rest)
	case "append":
		return c.storage(engine.Append, toks, rest)
	case "prepend":
		return c.storage(engine.Prepend, toks, rest)
	case "cas":
		return c.storage(engine.CAS, toks, rest)
	case "delete":
		c.delete(toks)
	case "incr":
		c.arith(toks, false)
	case "decr":
		c.arith(toks, true)
	case "touch":
		c.touch(toks)
	case "mg":
		c.metaGet(toks)
	case "ms":
		return c.metaSet(toks, rest)
	case "md":
		c.metaDelete(toks)
	case "ma":
		c.metaArithmetic(toks)
	case "mn":
		c.out = append(c.out, "MN\r\n"...)
	case "me":
		c.metaDebug(toks)
	case "stats":
		c.stats(toks)
	case "flush_all":
		c.flushAll(toks)
	case "lru_crawler":
		c.lruCrawler(toks)
	case "cache_memlimit":
		c.cacheMemlimit(toks)
	case "version":
		c.out = append(c.out, "VERSION "...)
		c.out = append(c.out, c.srv.opts.Version...)
		c.out = append(c.out, "\r\n"...)
	case "verbosity":
		if len(toks) < 2 || len(toks) > 3 {
			c.out = append(c.out, replyError...)
			break
		}
		// The level is read as memcached's safe_strtoul (keyway has no
		// levels to set); a third token that is not noreply is ignored.
		if _, ok := parseUint32(toks[1]); !ok {
			c.reply(noreply(toks), replyBadFormat)
			break
		}
		c.reply(noreply(toks), replyOK)
	case "quit":
		c.closeAfterWrite = true
	default:
		if bytes.HasPrefix(toks[len(toks)-1], []byte("HTTP/")) {
			// An HTTP request (a browser, a health check on the wrong
			// port): memcached hangs up without a word.
			c.closeAfterWrite = true
			break
		}
		c.out = append(c.out, replyUnknownCommand...)
	}
	return 0
}

// noreply reports whether the last token asks for no reply.
func noreply(toks [][]byte) bool {
	return len(toks) > 0 && string(toks[len(toks)-1]) == "noreply"
}

// reply writes s unless the client asked for no reply.
func (c *conn) reply(quiet bool, s string) {
	if !quiet {
		c.out = append(c.out, s...)
	}
}

// storage handles set/add/replace/append/prepend/cas:
//
//	<cmd> <key> <flags> <exptime> <bytes> [noreply]
//	cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]
//
// As in memcached, a last token that is not noreply is ignored.
func (c *conn) storage(mode engine.Mode, toks [][]byte, rest []byte) int {
	want := 5
	if mode == engine.CAS {
		want = 6
	}
	if len(toks) != want && len(toks) != want+1 {
		c.out = append(c.out, replyError...)
		return 0
	}
	quiet := noreply(toks)
	key := toks[1]
	flags, ok1 := parseUint32(toks[2])
	exptime, ok2 := parseInt32(toks[3])
	vlen, ok3 := parseDataLen(toks[4])
	var casID uint64
	ok4 := true
	if mode == engine.CAS {
		casID, ok4 = parseUint64(toks[5])
	}
	if len(key) > maxKeyLen || !validKey(key) || !ok1 || !ok2 || !ok3 || !ok4 {
		// memcached does not swallow the data here: it will be read as a
		// command. noreply silences the error too.
		c.reply(quiet, replyBadFormat)
		return 0
	}
	total := int(vlen) + 2
	verdict := c.takeValue(mode, key, vlen, c.head+total, len(rest) >= total)
	if verdict == valueTaken && len(rest) < total {
		c.need = total
		return needMore
	}
	// memcached counts the set once the line is read, whatever follows.
	c.srv.prefixes.set(key)
	switch verdict {
	case valueTooLarge:
		c.reply(quiet, replyTooLarge)
		c.swallow = int64(total)
		return 0
	case valueNoMemory:
		c.reply(quiet, replyNoMemory)
		c.swallow = int64(total)
		return 0
	}
	if rest[vlen] != '\r' || rest[vlen+1] != '\n' {
		c.reply(quiet, replyBadChunk)
		return total
	}
	value := rest[:vlen:vlen] // the engine copies what it keeps (StoreValue)
	status, _, err := c.eng.StoreValue(c.engineKey(key, storeAccess(mode)), value, engine.StoreRequest{Mode: mode, Flags: flags, TTL: exptime, CAS: casID, Tally: &c.tally})
	c.storeReply(quiet, status, err)
	return total
}

func (c *conn) storeReply(quiet bool, status engine.Status, err error) {
	switch status {
	case engine.Stored:
		c.reply(quiet, replyStored)
	case engine.NotStored:
		c.reply(quiet, replyNotStored)
	case engine.Exists:
		c.reply(quiet, replyExists)
	case engine.NotFound:
		c.reply(quiet, replyNotFound)
	case engine.TooLarge:
		c.reply(quiet, replyTooLarge)
	case engine.NoMemory:
		c.srv.noMemory.Add(1)
		c.reply(quiet, replyNoMemory)
	default:
		if !quiet {
			c.serverError(err)
		}
	}
}

// serverError reports an error from the engine, as memcached words it:
// CLIENT_ERROR when the request cannot succeed as sent, SERVER_ERROR object
// too large for a value its column cannot hold, else SERVER_ERROR; each with
// the reason. Like every reply in memcached 1.6, it is not sent for a noreply
// command.
func (c *conn) serverError(err error) {
	switch engine.KindOf(err) {
	case engine.ClientFault:
		c.out = append(c.out, "CLIENT_ERROR "...)
	case engine.ValueTooLarge:
		c.out = append(c.out, "SERVER_ERROR object too large for cache: "...)
	default:
		c.out = append(c.out, "SERVER_ERROR "...)
	}
	if err != nil {
		c.out = appendSanitized(c.out, err.Error())
	} else {
		c.out = append(c.out, "internal error"...)
	}
	c.out = append(c.out, "\r\n"...)
}

// appendSanitized keeps an error message on one protocol line.
func appendSanitized(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b == '\r' || b == '\n' {
			b = ' '
		}
		dst = append(dst, b)
	}
	return dst
}

// retrieval handles get/gets/gat/gats with any number of keys.
func (c *conn) retrieval(line []byte) {
	withCAS := hasWord(line, "gets") || hasWord(line, "gats")
	touch := hasWord(line, "gat") || hasWord(line, "gats")
	rest := line[bytes.IndexByte(line, ' ')+1:]
	var exptime int64
	if touch {
		tok, after := nextToken(rest)
		if tok == nil {
			// "gat " with no exptime: memcached's unknown command.
			c.out = append(c.out, replyError...)
			return
		}
		e, ok := parseInt32(tok)
		if !ok {
			c.out = append(c.out, replyBadExptime...)
			return
		}
		exptime, rest = e, after
	}
	if !allKeysValid(rest) {
		// memcached refuses the whole request: the error alone, no values.
		c.out = append(c.out, replyBadFormat...)
		return
	}
	if !touch && c.eng.HasContainers() {
		c.multiGet(rest, withCAS)
		return
	}
	any := false
	for c.werr == nil {
		key, after := nextToken(rest)
		if key == nil {
			break
		}
		rest = after
		any = true
		var item store.Item
		var found bool
		var err error
		if touch {
			item, found, err = c.eng.GetAndTouch(c.engineKey(key, engine.AccessOther), exptime)
		} else {
			item, found, err = c.getOne(key)
		}
		if err != nil {
			// memcached's reply to a failure mid-retrieval: the error ends the reply.
			c.serverError(err)
			return
		}
		c.srv.prefixes.get(key, found)
		if found {
			c.appendValue(key, itemView{item.Value, item.Flags, item.CAS}, withCAS)
			c.flushIfFull()
		}
	}
	if !any && !touch {
		// A gat/gats with an exptime and no key is an empty retrieval
		// (END) in memcached; a get without a key is an unknown command.
		c.out = append(c.out, replyError...)
		return
	}
	c.out = append(c.out, replyEnd...)
}

// allKeysValid reports whether every key of a retrieval's key list is legal.
func allKeysValid(keys []byte) bool {
	for {
		key, rest := nextToken(keys)
		if key == nil {
			return true
		}
		if !validKey(key) {
			return false
		}
		keys = rest
	}
}

// multiGetBatch is how many keys of a multi-key get are looked up together,
// in the text door (one get line) and the binary door (a run of pipelined
// gets, binGetRun): a container answers each batch with one query, and a
// request of many thousand keys costs the engine no more than this many
// items at a time.
const multiGetBatch = 1024

// multiGet answers a get/gets whose keys may live in containers: the keys are
// looked up together, so each container's rows are one query per batch. As
// memcached, a failed lookup ends the reply with an error after the values
// before it. The keys are valid (retrieval checked them).
func (c *conn) multiGet(rest []byte, withCAS bool) {
	any := false
	for {
		keys := c.keys[:0]
		// A key "@@name" switches the connection's container for the keys after it (engine.SwitchTo): it ends
		// the batch and is answered after it, with the container's table as its value, as the plugin answers.
		var switchKey []byte
		var switchTo *engine.Table
		for len(keys) < multiGetBatch {
			key, after := nextToken(rest)
			if key == nil {
				break
			}
			rest = after
			if switchTo = c.eng.SwitchTo(key); switchTo != nil {
				switchKey = key
				break
			}
			keys = append(keys, key)
		}
		c.keys = keys[:0]
		if len(keys) == 0 && switchTo == nil {
			if !any {
				c.out = append(c.out, replyError...)
			} else {
				c.out = append(c.out, replyEnd...)
			}
			return
		}
		any = true
		var items []store.Item
		var found []bool
		var err error
		if len(keys) == 1 { // the usual get: answered without the slices a multi-get allocates
			var one [1]store.Item
			var oneFound [1]bool
			one[0], oneFound[0], err = c.getOne(keys[0])
			items, found = one[:], oneFound[:]
		} else {
			items, found, err = c.getMulti(keys)
		}
		for i, key := range keys {
			c.srv.prefixes.get(key, found[i])
			if found[i] {
				c.appendValue(key, itemView{items[i].Value, items[i].Flags, items[i].CAS}, withCAS)
				if c.flushIfFull() != nil {
					return
				}
			}
		}
		clear(keys) // they point into the read buffer, which may be released
		if err != nil {
			c.serverError(err)
			return
		}
		if switchTo != nil {
			c.container = switchTo
			c.appendValue(switchKey, itemView{value: []byte(switchTo.PluginTableName())}, withCAS)
		}
	}
}

// getMulti is engine.GetMulti of keys as this connection routes them (ekey); keys is left as it is.
func (c *conn) getMulti(keys [][]byte) ([]store.Item, []bool, error) {
	if len(keys) == 0 {
		return nil, nil, nil
	}
	ek := keys
	if c.container != nil {
		ek = make([][]byte, len(keys))
		for i, k := range keys {
			ek[i] = c.ekey(k)
		}
	}
	// The engine tells c (WillWait) before it waits on MySQL: on an event loop c steps away then, so a get answered
	// from what keyway holds stays on the loop, and each key is routed and looked up once either way.
	return c.eng.GetMultiTallied(&c.tally, ek, c)
}

// getOne is engine.GetTallied of key as this connection routes it; like getMulti, it steps away from an event loop
// only when the answer needs MySQL (WillWait).
//
// A value from the local store is copied to memory of the connection's (Take), not to a slice of its own.
func (c *conn) getOne(key []byte) (store.Item, bool, error) {
	return c.eng.GetTalliedInto(&c.tally, c.ekey(key), c, c)
}

type itemView struct {
	value []byte
	flags uint32
	cas   uint64
}

func (c *conn) appendValue(key []byte, it itemView, withCAS bool) {
	c.out = append(c.out, "VALUE "...)
	c.out = append(c.out, key...)
	c.out = append(c.out, ' ')
	c.out = strconv.AppendUint(c.out, uint64(it.flags), 10)
	c.out = append(c.out, ' ')
	c.out = strconv.AppendInt(c.out, int64(len(it.value)), 10)
	if withCAS {
		c.out = append(c.out, ' ')
		c.out = strconv.AppendUint(c.out, it.cas, 10)
	}
	c.out = append(c.out, "\r\n"...)
	c.appendData(it.value)
	c.out = append(c.out, "\r\n"...)
}

func nextToken(b []byte) (tok, rest []byte) {
	i := 0
	for i < len(b) && b[i] == ' ' {
		i++
	}
	j := i
	for j < len(b) && b[j] != ' ' {
		j++
	}
	if i == j {
		return nil, nil
	}
	return b[i:j], b[j:]
}

// delete <key> [0] [noreply], as memcached reads it: noreply counts only
// after the key ("delete noreply" deletes the key "noreply"), and it silences
// every reply, the errors too, so a pipelining client stays in step.
func (c *conn) delete(toks [][]byte) {
	n := len(toks)
	if n < 2 || n > 4 {
		c.out = append(c.out, replyError...)
		return
	}
	quiet := n > 2 && noreply(toks)
	holdZero := n > 2 && string(toks[2]) == "0"
	if n == 3 && !holdZero && !quiet || n == 4 && !(holdZero && quiet) {
		c.reply(quiet, replyDeleteUsage)
		return
	}
	if !validKey(toks[1]) {
		c.reply(quiet, replyBadFormat)
		return
	}
	c.srv.prefixes.del(toks[1])
	status, err := c.eng.Delete(c.engineKey(toks[1], engine.AccessOther), engine.DeleteRequest{})
	switch status {
	case engine.Deleted:
		c.reply(quiet, replyDeleted)
	case engine.NotFound:
		c.reply(quiet, replyNotFound)
	default:
		if !quiet {
			c.serverError(err)
		}
	}
}

// keyAndArgument checks a "<cmd> <key> <arg> [noreply]" line, answering a
// malformed one; it reports whether noreply was given and whether to go on.
// As in memcached, a fourth token that is not noreply is ignored, and
// noreply silences the errors after the token count too.
func (c *conn) keyAndArgument(toks [][]byte) (quiet, ok bool) {
	if len(toks) != 3 && len(toks) != 4 {
		c.out = append(c.out, replyError...)
		return false, false
	}
	quiet = noreply(toks)
	if !validKey(toks[1]) {
		c.reply(quiet, replyBadFormat)
		return quiet, false
	}
	return quiet, true
}

// incr|decr <key> <value> [noreply]
func (c *conn) arith(toks [][]byte, decr bool) {
	quiet, ok := c.keyAndArgument(toks)
	if !ok {
		return
	}
	delta, ok := parseUint64(toks[2])
	if !ok {
		c.reply(quiet, replyBadDelta)
		return
	}
	res, err := c.eng.IncrDecr(c.engineKey(toks[1], engine.AccessOther), engine.Arith{Delta: delta, Decr: decr})
	switch res.Status {
	case engine.Stored:
		if !quiet {
			c.out = strconv.AppendUint(c.out, res.Value, 10)
			c.out = append(c.out, "\r\n"...)
		}
	case engine.NotFound:
		c.reply(quiet, replyNotFound)
	case engine.NonNumeric:
		c.reply(quiet, replyNonNumeric)
	case engine.NoMemory:
		c.reply(quiet, replyNoMemory)
	default:
		if !quiet {
			c.serverError(err)
		}
	}
}

// touch <key> <exptime> [noreply]
func (c *conn) touch(toks [][]byte) {
	quiet, ok := c.keyAndArgument(toks)
	if !ok {
		return
	}
	exptime, ok := parseInt32(toks[2])
	if !ok {
		c.reply(quiet, replyBadExptime)
		return
	}
	_, status, err := c.eng.Touch(c.engineKey(toks[1], engine.AccessOther), exptime)
	switch status {
	case engine.Touched:
		c.reply(quiet, replyTouched)
	case engine.NotFound:
		c.reply(quiet, replyNotFound)
	default:
		if !quiet {
			c.serverError(err)
		}
	}
}

// flush_all [delay] [noreply], as memcached reads it: a third token that is
// not noreply is ignored, a delay of 0 or less flushes now, and noreply
// silences the error too.
func (c *conn) flushAll(toks [][]byte) {
	n := len(toks)
	if n > 3 {
		c.out = append(c.out, replyError...)
		return
	}
	quiet := noreply(toks)
	var delay int64
	if n > 1 && !(n == 2 && quiet) {
		d, ok := parseInt32(toks[1])
		if !ok {
			c.reply(quiet, replyBadExptime)
			return
		}
		delay = d
	}
	if err := c.engineFlushAll(delay); err != nil {
		if !quiet {
			c.serverError(err)
		}
		return
	}
	c.reply(quiet, replyOK)
}

// Number parsing as memcached's safe_strto* over C's strtol/strtoull, base
// 10: blanks before, an optional sign, digits, then the token's end or a
// blank; out of the 64-bit range fails. A 32-bit field keeps the low 32 bits
// of the 64-bit number, as memcached's int32 and uint32 fields do, so
// "4294967297" is 1 and "2147483648" is -2147483648, not an error.

// parseUint64 is safe_strtoull (engine.ParseUint64).
func parseUint64(b []byte) (uint64, bool) { return engine.ParseUint64(b) }

// parseUint32 is safe_strtoul into a uint32 field.
func parseUint32(b []byte) (uint32, bool) {
	n, ok := parseUint64(b)
	return uint32(n), ok
}

// parseInt32 is safe_strtol into an int32 field (exptimes, lengths).
func parseInt32(b []byte) (int64, bool) {
	neg, mag, ok := engine.ParseDecimal(b)
	if !ok || mag > 1<<63 || !neg && mag == 1<<63 {
		return 0, false
	}
	n := int64(mag)
	if neg {
		n = -n
	}
	return int64(int32(n)), true
}

// parseDataLen reads a data block's announced length: with its "\r\n" it
// must fit an int32, as in memcached, else the command line is malformed.
func parseDataLen(b []byte) (int64, bool) {
	n, ok := parseInt32(b)
	return n, ok && n >= 0 && n <= math.MaxInt32-2
}

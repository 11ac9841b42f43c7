package memcache

import (
	"encoding/base64"
	"strconv"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
)

// Meta protocol: mg, ms, md, ma and me (mn is answered by the dispatcher), as
// memcached 1.6's doc/protocol.txt and proto_text.c. This file parses flags and
// encodes replies; what the flags do to an item is the engine's (engine/meta.go).
//
// A meta command is "<cmd> <key> [<datalen>] <flag>*". A flag is one byte,
// some with a token glued on ("T30", "Oabc"). Flags that return something are
// answered in the order the client sent them. With q a command stays silent
// when it went as expected (mg: EN; ms, md, ma: HD; ma: VA too); errors are
// always sent. Error strings, and which error wins when a line has several,
// follow memcached; so does the swallowing of an ms data block refused after
// its length was read.

const (
	// metaMaxTokens is memcached's MFLAG_MAX_OPT_LENGTH (20), which counts its
	// terminal token: command, key and flags together.
	metaMaxTokens = 19
	// metaMaxOpaque bounds an O token, the 'O' included.
	metaMaxOpaque = 32
)

// metaFlags are the parsed flags of one meta command.
type metaFlags struct {
	key    []byte // the key, base64-decoded with b
	binary bool   // b: key is base64; k answers it encoded, followed by " b"
	quiet  bool   // q
	value  bool   // v
	noBump bool   // u

	setTTL     bool // T
	ttl        int64
	vivify     bool // N
	vivifyTTL  int64
	recache    bool // R
	recacheTTL int64

	compare bool // C
	cas     uint64
	newCAS  uint64 // E
	inval   bool   // I
	flags   uint32 // F
	mode    byte   // M
	delta   uint64 // D
	initial uint64 // J
}

// parseMetaFlags reads flag tokens as memcached's _meta_flag_preparse: a flag
// seen twice (or not ASCII) and an unknown flag end the parse with their error;
// a bad token is remembered and the parse goes on, so the last one counts. It
// returns "" when every flag is good.
func parseMetaFlags(f *metaFlags, key []byte, toks [][]byte) string {
	var seen [128]bool
	f.key = key
	f.delta = 1
	bad, errstr := false, ""
	badToken := func(s string) { bad, errstr = true, s }
	for _, tok := range toks {
		o, arg := tok[0], tok[1:]
		if o >= 127 || seen[o] {
			return "CLIENT_ERROR duplicate flag"
		}
		seen[o] = true
		var ok bool
		switch o {
		case 'b':
			// Not in place, as memcached does: an ms line is parsed again
			// when its data has not all arrived.
			if k, ok := decodeKey(key); ok {
				f.key = k
			} else {
				badToken("CLIENT_ERROR error decoding key")
			}
			f.binary = true
		case 'N':
			f.vivify = true
			if f.vivifyTTL, ok = parseInt32(arg); !ok {
				badToken("CLIENT_ERROR bad token in command line format")
			}
		case 'T':
			f.setTTL = true
			if f.ttl, ok = parseInt32(arg); !ok {
				badToken("CLIENT_ERROR bad token in command line format")
			}
		case 'R':
			f.recache = true
			if f.recacheTTL, ok = parseInt32(arg); !ok {
				badToken("CLIENT_ERROR bad token in command line format")
			}
		case 'C':
			f.compare = true
			if f.cas, ok = parseUint64(arg); !ok {
				badToken("CLIENT_ERROR bad token in command line format")
			}
		case 'E':
			if f.newCAS, ok = parseUint64(arg); !ok {
				badToken("CLIENT_ERROR bad token in command line format")
			}
		case 'F':
			if f.flags, ok = parseUint32(arg); !ok {
				bad = true // memcached keeps the message it had
			}
		case 'M':
			if len(tok) != 2 {
				badToken("CLIENT_ERROR incorrect length for M token")
			} else {
				f.mode = tok[1]
			}
		case 'J':
			if f.initial, ok = parseUint64(arg); !ok {
				badToken("CLIENT_ERROR invalid numeric initial value")
			}
		case 'D':
			if f.delta, ok = parseUint64(arg); !ok {
				badToken("CLIENT_ERROR invalid numeric delta value")
			}
		case 'I':
			f.inval = true
		case 'q':
			f.quiet = true
		case 'v':
			f.value = true
		case 'u':
			f.noBump = true
		case 'c', 'f', 'h', 'k', 'l', 's', 't', 'O', 'P', 'L':
			// Return flags (answered while encoding) and proxy hints.
		default:
			return "CLIENT_ERROR invalid flag"
		}
	}
	if !bad {
		return ""
	}
	if errstr == "" {
		return replyBadFormat[:len(replyBadFormat)-2]
	}
	return errstr
}

// decodeKey decodes a base64 key (b flag); an empty result is a failure.
func decodeKey(enc []byte) ([]byte, bool) {
	key := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Decode(key, enc)
	return key[:n], err == nil && n > 0
}

// opaqueTooLong reports an O token over memcached's limit. O tokens, like
// keys, are echoed as sent, control characters included, as memcached does.
func opaqueTooLong(toks [][]byte) bool {
	for _, tok := range toks {
		if tok[0] == 'O' && len(tok) > metaMaxOpaque {
			return true
		}
	}
	return false
}

// metaError answers a failed meta command; quiet mode never hides errors.
func (c *conn) metaError(s string) {
	c.out = append(c.out, s...)
	c.out = append(c.out, "\r\n"...)
}

// metaCheckLine applies the checks memcached makes before parsing flags. It
// answers and returns false when the line is refused; tooMany is the command's
// own wording for too many tokens.
func (c *conn) metaCheckLine(toks [][]byte, tooMany string) bool {
	switch {
	case len(toks) < 2:
		c.out = append(c.out, replyError...)
	case !validKey(toks[1]):
		c.out = append(c.out, replyBadFormat...)
	case len(toks) > metaMaxTokens:
		c.metaError(tooMany)
	default:
		return true
	}
	return false
}

// appendKey writes the k return flag: the key as sent, or re-encoded when binary.
func (c *conn) appendKey(f *metaFlags, keyTok []byte) {
	c.out = append(c.out, " k"...)
	if !f.binary {
		c.out = append(c.out, keyTok...)
		return
	}
	c.out = base64.StdEncoding.AppendEncode(c.out, f.key)
	c.out = append(c.out, " b"...)
}

// appendEcho writes the return flags every reply carries: O and k, in order.
func (c *conn) appendEcho(f *metaFlags, keyTok []byte, flags [][]byte) {
	for _, tok := range flags {
		switch tok[0] {
		case 'O':
			c.out = append(c.out, ' ')
			c.out = append(c.out, tok...)
		case 'k':
			c.appendKey(f, keyTok)
		}
	}
}

// appendTTL writes a remaining TTL: -1 for an item that does not expire.
func (c *conn) appendTTL(exptime, now int64) {
	if exptime == 0 {
		c.out = append(c.out, "-1"...)
		return
	}
	c.out = strconv.AppendInt(c.out, exptime-now, 10)
}

// ttlAt tracks the exptime a t flag reports: memcached applies T (and N on a
// created item) as it walks the flags, so a t before them shows the old TTL.
func ttlAt(tok []byte, exp, final int64, created bool) int64 {
	if tok[0] == 'T' || tok[0] == 'N' && created {
		return final
	}
	return exp
}

// mg <key> <flag>*
func (c *conn) metaGet(toks [][]byte) {
	if !c.metaCheckLine(toks, "CLIENT_ERROR options flags are too long") {
		return
	}
	var f metaFlags
	flags := toks[2:]
	if e := parseMetaFlags(&f, toks[1], flags); e != "" {
		c.metaError(e)
		return
	}
	if opaqueTooLong(flags) {
		c.metaError("CLIENT_ERROR opaque token too long")
		return
	}
	req := engine.MetaGetRequest{
		NoUpdate: f.noBump,
		SetTTL:   f.setTTL, TTL: f.ttl,
		Vivify: f.vivify, VivifyTTL: f.vivifyTTL,
		Recache: f.recache, RecacheTTL: f.recacheTTL,
		NewCAS: f.newCAS,
		Tally:  &c.tally,
		Into:   c, // the value is copied into out, or written out before Take's memory is reused (appendData)
	}
	var key []byte
	if !f.setTTL && !f.vivify && !f.recache && f.newCAS == 0 {
		// A read, answered on the loop when its copy is held: the engine tells c before it waits (WillWait).
		key, req.Waiter = c.ekey(f.key), c
	} else {
		key = c.engineKey(f.key, engine.AccessOther) // T touches the row; N, R and E are refused on a table, at once
	}
	res, err := c.eng.MetaGet(key, req)
	if err != nil {
		c.serverError(err)
		return
	}
	if !res.Found {
		if !f.quiet {
			c.out = append(c.out, "EN"...)
			c.appendEcho(&f, toks[1], flags)
			c.out = append(c.out, "\r\n"...)
		}
		return
	}
	it := &res.Item
	if f.value {
		c.out = append(c.out, "VA "...)
		c.out = strconv.AppendInt(c.out, int64(len(it.Value)), 10)
	} else {
		c.out = append(c.out, "HD"...)
	}
	exp := res.PrevExptime
	for _, tok := range flags {
		exp = ttlAt(tok, exp, it.Exptime, res.Created)
		switch tok[0] {
		case 's':
			c.out = append(c.out, " s"...)
			c.out = strconv.AppendInt(c.out, int64(len(it.Value)), 10)
		case 't':
			c.out = append(c.out, " t"...)
			c.appendTTL(exp, res.Now)
		case 'c':
			c.out = append(c.out, " c"...)
			c.out = strconv.AppendUint(c.out, it.CAS, 10)
		case 'f':
			c.out = append(c.out, " f"...)
			c.out = strconv.AppendUint(c.out, uint64(it.Flags), 10)
		case 'l':
			c.out = append(c.out, " l"...)
			c.out = strconv.AppendInt(c.out, res.Now-it.LastAccess, 10)
		case 'h':
			if it.Fetched {
				c.out = append(c.out, " h1"...)
			} else {
				c.out = append(c.out, " h0"...)
			}
		case 'O':
			c.out = append(c.out, ' ')
			c.out = append(c.out, tok...)
		case 'k':
			c.appendKey(&f, toks[1])
		}
	}
	// Z before X, and never W with Z, as memcached.
	if res.TokenSent {
		c.out = append(c.out, " Z"...)
	}
	if it.Stale {
		c.out = append(c.out, " X"...)
	}
	if res.Won {
		c.out = append(c.out, " W"...)
	}
	c.out = append(c.out, "\r\n"...)
	if f.value {
		c.appendData(it.Value)
		c.out = append(c.out, "\r\n"...)
	}
}

// ms <key> <datalen> <flag>*\r\n<data>\r\n
func (c *conn) metaSet(toks [][]byte, rest []byte) int {
	if !c.metaCheckLine(toks, "CLIENT_ERROR options flags too long") {
		return 0
	}
	// Until the length is known the data cannot be swallowed: memcached
	// reads it as the next command.
	if len(toks) == 2 {
		c.out = append(c.out, replyBadFormat...)
		return 0
	}
	vlen, ok := parseDataLen(toks[2])
	if !ok {
		c.out = append(c.out, replyBadFormat...)
		return 0
	}
	total := int(vlen) + 2
	var f metaFlags
	flags := toks[3:]
	e := parseMetaFlags(&f, toks[1], flags)
	var mode engine.Mode
	if e == "" {
		switch f.mode {
		case 0, 'S':
			mode = engine.Set
		case 'E':
			mode = engine.Add
		case 'A':
			mode = engine.Append
		case 'P':
			mode = engine.Prepend
		case 'R':
			mode = engine.Replace
		default:
			e = "CLIENT_ERROR invalid mode for ms M token"
		}
	}
	if e == "" && opaqueTooLong(flags) {
		e = "CLIENT_ERROR opaque token too long"
	}
	if e == "" {
		// As memcached's ms in every mode, a refused write drops the old
		// value (mode Set): no stale copy outlives it.
		switch c.takeValue(engine.Set, f.key, vlen, c.head+total, len(rest) >= total) {
		case valueTooLarge:
			e = replyTooLarge[:len(replyTooLarge)-2]
		case valueNoMemory:
			e = replyNoMemory[:len(replyNoMemory)-2]
		}
	}
	if e != "" {
		c.metaError(e)
		c.swallow = int64(total)
		return 0
	}
	if len(rest) < total {
		c.need = total
		return needMore
	}
	if rest[vlen] != '\r' || rest[vlen+1] != '\n' {
		c.out = append(c.out, replyBadChunk...)
		return total
	}
	value := rest[:vlen:vlen] // the engine copies what it keeps (MetaSet, as StoreValue)
	r := engine.StoreRequest{
		Mode:    mode,
		Flags:   f.flags,
		TTL:     f.ttl,
		NewCAS:  f.newCAS,
		StaleOK: f.inval,
		Vivify:  f.vivify, VivifyTTL: f.vivifyTTL,
		Tally: &c.tally,
	}
	if f.compare {
		// As memcached's ms: C makes a set or replace a cas, and gives
		// append and prepend an id to match; add compares nothing.
		switch mode {
		case engine.Set, engine.Replace:
			r.Mode, r.CAS = engine.CAS, f.cas
		case engine.Append, engine.Prepend:
			r.CAS = f.cas
		}
	}
	status, it, err := c.eng.MetaSet(c.engineKey(f.key, engine.AccessOther), value, r)
	switch status {
	case engine.Stored:
		if f.quiet {
			return total
		}
		c.out = append(c.out, "HD"...)
	case engine.NotStored:
		c.out = append(c.out, "NS"...)
	case engine.Exists:
		c.out = append(c.out, "EX"...)
	case engine.NotFound:
		c.out = append(c.out, "NF"...)
	case engine.TooLarge:
		c.out = append(c.out, replyTooLarge...)
		return total
	case engine.NoMemory:
		c.srv.noMemory.Add(1)
		c.out = append(c.out, replyNoMemory...)
		return total
	default:
		c.serverError(err)
		return total
	}
	for _, tok := range flags {
		switch tok[0] {
		case 'O':
			c.out = append(c.out, ' ')
			c.out = append(c.out, tok...)
		case 'k':
			c.appendKey(&f, toks[1])
		case 'c':
			c.out = append(c.out, " c"...)
			c.out = strconv.AppendUint(c.out, it.CAS, 10)
		case 's':
			// The stored size (after an append), or the size sent.
			size := len(value)
			if status == engine.Stored {
				size = len(it.Value)
			}
			c.out = append(c.out, " s"...)
			c.out = strconv.AppendInt(c.out, int64(size), 10)
		}
	}
	c.out = append(c.out, "\r\n"...)
	return total
}

// md <key> <flag>*
func (c *conn) metaDelete(toks [][]byte) {
	if !c.metaCheckLine(toks, "CLIENT_ERROR options flags too long") {
		return
	}
	var f metaFlags
	flags := toks[2:]
	if parseMetaFlags(&f, toks[1], flags) != "" {
		c.metaError("CLIENT_ERROR invalid or duplicate flag")
		return
	}
	if opaqueTooLong(flags) {
		c.metaError("CLIENT_ERROR opaque token too long")
		return
	}
	status, err := c.eng.MetaDelete(c.engineKey(f.key, engine.AccessOther), engine.DeleteRequest{
		CompareCAS: f.compare, CAS: f.cas,
		Invalidate: f.inval,
		SetTTL:     f.setTTL, TTL: f.ttl,
		NewCAS: f.newCAS,
	})
	switch status {
	case engine.Deleted:
		if f.quiet {
			return
		}
		c.out = append(c.out, "HD"...)
	case engine.NotFound:
		c.out = append(c.out, "NF"...)
	case engine.Exists:
		c.out = append(c.out, "EX"...)
	default:
		c.serverError(err)
		return
	}
	c.appendEcho(&f, toks[1], flags)
	c.out = append(c.out, "\r\n"...)
}

// ma <key> <flag>*
func (c *conn) metaArithmetic(toks [][]byte) {
	if !c.metaCheckLine(toks, "CLIENT_ERROR options flags too long") {
		return
	}
	var f metaFlags
	flags := toks[2:]
	if parseMetaFlags(&f, toks[1], flags) != "" {
		c.metaError("CLIENT_ERROR invalid or duplicate flag")
		return
	}
	var decr bool
	switch f.mode {
	case 0, 'I', '+':
	case 'D', '-':
		decr = true
	default:
		c.metaError("CLIENT_ERROR invalid mode for ma M token")
		return
	}
	if opaqueTooLong(flags) {
		c.metaError("CLIENT_ERROR opaque token too long")
		return
	}
	res, err := c.eng.MetaArith(c.engineKey(f.key, engine.AccessOther), engine.Arith{
		Decr:  decr,
		Delta: f.delta, Initial: f.initial,
		Create: f.vivify, CreateTTL: f.vivifyTTL,
		SetTTL: f.setTTL, TTL: f.ttl,
		CAS:    f.cas,
		NewCAS: f.newCAS,
	})
	switch res.Status {
	case engine.Stored:
	case engine.NotFound:
		c.out = append(c.out, "NF"...)
		c.appendEcho(&f, toks[1], flags)
		c.out = append(c.out, "\r\n"...)
		return
	case engine.Exists:
		c.out = append(c.out, "EX"...)
		c.appendEcho(&f, toks[1], flags)
		c.out = append(c.out, "\r\n"...)
		return
	case engine.NonNumeric:
		c.out = append(c.out, replyNonNumeric...)
		return
	case engine.NoMemory:
		c.metaError("SERVER_ERROR out of memory")
		return
	default:
		c.serverError(err)
		return
	}
	if f.quiet {
		return
	}
	var num [20]byte
	digits := strconv.AppendUint(num[:0], res.Value, 10)
	if f.value {
		c.out = append(c.out, "VA "...)
		c.out = strconv.AppendInt(c.out, int64(len(digits)), 10)
	} else {
		c.out = append(c.out, "HD"...)
	}
	exp := res.PrevExptime
	for _, tok := range flags {
		exp = ttlAt(tok, exp, res.Item.Exptime, res.Created)
		switch tok[0] {
		case 'c':
			c.out = append(c.out, " c"...)
			c.out = strconv.AppendUint(c.out, res.Item.CAS, 10)
		case 't':
			c.out = append(c.out, " t"...)
			c.appendTTL(exp, res.Now)
		case 'O':
			c.out = append(c.out, ' ')
			c.out = append(c.out, tok...)
		case 'k':
			c.appendKey(&f, toks[1])
		}
	}
	c.out = append(c.out, "\r\n"...)
	if f.value {
		c.out = append(c.out, digits...)
		c.out = append(c.out, "\r\n"...)
	}
}

// me <key> [b]: memcached's debug line for an item, without touching it.
func (c *conn) metaDebug(toks [][]byte) {
	if len(toks) < 2 || !validKey(toks[1]) {
		c.out = append(c.out, replyBadFormat...)
		return
	}
	key, binary := toks[1], len(toks) > 2 && string(toks[2]) == "b"
	if binary {
		var ok bool
		if key, ok = decodeKey(key); !ok {
			c.out = append(c.out, replyBadFormat...)
			return
		}
	}
	c.srv.metaCmds.Add(1) // memcached's cmd_meta counts "me" only
	it, size, now, ok := c.eng.MetaDebug(c.ekey(key))
	if !ok {
		c.out = append(c.out, "EN\r\n"...)
		return
	}
	c.out = append(c.out, "ME "...)
	if binary {
		c.out = base64.StdEncoding.AppendEncode(c.out, key)
	} else {
		c.out = append(c.out, key...)
	}
	// exp is memcached's now-minus-exptime: minus the remaining seconds.
	c.out = append(c.out, " exp="...)
	if it.Exptime == 0 {
		c.out = append(c.out, "-1"...)
	} else {
		c.out = strconv.AppendInt(c.out, now-it.Exptime, 10)
	}
	c.out = append(c.out, " la="...)
	c.out = strconv.AppendInt(c.out, now-it.LastAccess, 10)
	c.out = append(c.out, " cas="...)
	c.out = strconv.AppendUint(c.out, it.CAS, 10)
	if it.Fetched {
		c.out = append(c.out, " fetch=yes"...)
	} else {
		c.out = append(c.out, " fetch=no"...)
	}
	c.out = append(c.out, " cls="...)
	// The store's key (a container row's local copy has its own) is what
	// size charges beside the value and the overhead.
	keyLen := int(size) - len(it.Value) - store.ItemOverhead
	c.out = strconv.AppendInt(c.out, int64(store.Class(keyLen, len(it.Value), it.Flags)), 10)
	c.out = append(c.out, " size="...)
	c.out = strconv.AppendInt(c.out, size, 10)
	c.out = append(c.out, "\r\n"...)
}

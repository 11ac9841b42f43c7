package memcache

import (
	"encoding/binary"
	"strings"

	"github.com/keywaydb/keyway/internal/engine"
	"github.com/keywaydb/keyway/internal/store"
)

// Binary protocol, as memcached 1.6's protocol_binary.h and proto_bin.c (the
// protocol is deprecated upstream, but libmemcached and php-memcached still
// speak it).
//
// A request is a 24-byte header, then extras, key and value, whose lengths
// the header gives (the value length is the total body length less extras and
// key). The reply header is written into c.out followed by its body, so a
// reply costs no allocation; only a stored value is copied out of the read
// buffer, because the store keeps it.
//
// The header is checked before the body is waited for: a request whose
// lengths do not fit its opcode is refused and the connection closed, as
// memcached does, so only a storage command can make the connection buffer
// a body, and then only up to the item size limit; a larger value is answered
// E2BIG and discarded as it arrives (c.swallow).
//
// Quiet opcodes (…Q) suppress a success reply; getq, getkq, gatq and gatkq
// suppress a miss instead, and still return hits. Errors are always sent,
// with memcached's message as the body.

const (
	binaryRequestMagic  = 0x80
	binaryResponseMagic = 0x81
	binaryHeaderLen     = 24
)

// Opcodes (protocol_binary_command).
const (
	opGet        = 0x00
	opSet        = 0x01
	opAdd        = 0x02
	opReplace    = 0x03
	opDelete     = 0x04
	opIncrement  = 0x05
	opDecrement  = 0x06
	opQuit       = 0x07
	opFlush      = 0x08
	opGetQ       = 0x09
	opNoop       = 0x0a
	opVersion    = 0x0b
	opGetK       = 0x0c
	opGetKQ      = 0x0d
	opAppend     = 0x0e
	opPrepend    = 0x0f
	opStat       = 0x10
	opSetQ       = 0x11
	opAddQ       = 0x12
	opReplaceQ   = 0x13
	opDeleteQ    = 0x14
	opIncrementQ = 0x15
	opDecrementQ = 0x16
	opQuitQ      = 0x17
	opFlushQ     = 0x18
	opAppendQ    = 0x19
	opPrependQ   = 0x1a
	// opVerbosity is an unknown command to memcached 1.6's binary protocol
	// (it answers 0x81 and swallows the body), so keyway does not know it.
	opVerbosity = 0x1b
	opTouch     = 0x1c
	opGAT       = 0x1d
	opGATQ      = 0x1e
	opGATK      = 0x23
	opGATKQ     = 0x24
	// SASL (0x20 list mechs, 0x21 auth, 0x22 step) is in auth.go; without
	// users configured it is an unknown command, as memcached without -S.
)

// Response statuses (protocol_binary_response_status).
const (
	statusOK             uint16 = 0x0000
	statusKeyNotFound    uint16 = 0x0001
	statusKeyExists      uint16 = 0x0002
	statusTooLarge       uint16 = 0x0003
	statusInvalid        uint16 = 0x0004
	statusNotStored      uint16 = 0x0005
	statusNonNumeric     uint16 = 0x0006
	statusUnknownCommand uint16 = 0x0081
	statusNoMemory       uint16 = 0x0082
	statusInternal       uint16 = 0x0084 // EINTERNAL: a server-side failure; the body says what
)

// incrNoCreate in an incr/decr's expiration extra means "fail on a missing
// key" rather than create it with the initial value.
const incrNoCreate = 0xffffffff

// binHeader is a request header in host order. The opaque is echoed as sent.
type binHeader struct {
	opcode  byte
	extlen  int
	keylen  int
	bodylen int
	opaque  uint32
	cas     uint64
}

func parseBinHeader(b []byte) binHeader {
	return binHeader{
		opcode:  b[1],
		keylen:  int(binary.BigEndian.Uint16(b[2:4])),
		extlen:  int(b[4]),
		bodylen: int(binary.BigEndian.Uint32(b[8:12])),
		opaque:  binary.BigEndian.Uint32(b[12:16]),
		cas:     binary.BigEndian.Uint64(b[16:24]),
	}
}

// binaryRequest answers one binary request at the start of buf and returns
// the bytes it used, or needMore with c.need set to the bytes it waits for.
func (c *conn) binaryRequest(buf []byte) (int, error) {
	if buf[0] != binaryRequestMagic {
		// memcached closes a binary connection at a bad magic byte: nothing
		// after it can be framed.
		return 0, errClose
	}
	if len(buf) < binaryHeaderLen {
		c.need = binaryHeaderLen
		return needMore, nil
	}
	h := parseBinHeader(buf)
	if h.keylen+h.extlen > h.bodylen {
		// The body cannot hold what the header says it holds; memcached
		// answers "unknown command" and closes.
		c.binError(h, statusUnknownCommand)
		c.closeAfterWrite = true
		return binaryHeaderLen, nil
	}
	if c.srv.auth != nil {
		if n, done := c.binaryAuthGate(buf, h); done {
			return n, nil
		}
	}
	if h.keylen > maxKeyLen {
		c.binProtocolError(h)
		return binaryHeaderLen, nil
	}
	quiet, known := binQuiet(h.opcode)
	if !known {
		c.binError(h, statusUnknownCommand)
		c.swallow = int64(h.bodylen)
		return binaryHeaderLen, nil
	}
	if !binShapeOK(h) {
		c.binProtocolError(h)
		return binaryHeaderLen, nil
	}
	total := binaryHeaderLen + h.bodylen
	vlen := h.bodylen - h.extlen - h.keylen
	if vlen > 0 {
		// Only storage commands carry a value (the shape check refused the
		// rest), and only a value makes a request outgrow the free part of
		// the read buffer. It is refused before it arrives, with the key in
		// hand: too large, or no room in the in-flight budget.
		head := binaryHeaderLen + h.extlen + h.keylen
		if len(buf) < head {
			c.need = head
			return needMore, nil
		}
		mode := engine.Append // any mode but Set: the old value stays
		if h.opcode == opSet || h.opcode == opSetQ {
			mode = engine.Set // a refused set drops the old value, as memcached does
		}
		verdict := c.takeValue(mode, buf[binaryHeaderLen+h.extlen:head], int64(vlen), total, len(buf) >= total)
		if verdict != valueTaken {
			// memcached counts the set before it finds no room for the value.
			c.srv.prefixes.set(buf[binaryHeaderLen+h.extlen : head])
		}
		switch verdict {
		case valueTooLarge:
			c.binError(h, statusTooLarge)
			c.swallow = int64(vlen)
			return head, nil
		case valueNoMemory:
			c.binError(h, statusNoMemory)
			c.swallow = int64(vlen)
			return head, nil
		}
	}
	if len(buf) < total {
		c.need = total
		return needMore, nil
	}
	body := buf[binaryHeaderLen:total]
	extras := body[:h.extlen]
	key := body[h.extlen : h.extlen+h.keylen]
	value := body[h.extlen+h.keylen:]

	switch h.opcode {
	case opGet, opGetQ, opGetK, opGetKQ:
		if c.eng.HasContainers() {
			if n := c.binGetRun(buf); n > 0 {
				return n, nil
			}
		}
		c.binGet(h, quiet, extras, key)
	case opGAT, opGATQ, opGATK, opGATKQ, opTouch:
		c.binGet(h, quiet, extras, key)
	case opSet, opSetQ, opAdd, opAddQ, opReplace, opReplaceQ:
		c.binStore(h, quiet, extras, key, value)
	case opAppend, opAppendQ, opPrepend, opPrependQ:
		c.binConcat(h, quiet, key, value)
	case opDelete, opDeleteQ:
		c.binDelete(h, quiet, key)
	case opIncrement, opIncrementQ, opDecrement, opDecrementQ:
		c.binArith(h, quiet, extras, key)
	case opFlush, opFlushQ:
		var delay int64
		if h.extlen == 4 {
			delay = int64(binary.BigEndian.Uint32(extras))
		}
		if err := c.engineFlushAll(delay); err != nil {
			c.binServerError(h, err)
			break
		}
		c.binSuccess(h, quiet, 0)
	case opNoop:
		c.binSuccess(h, false, 0)
	case opVersion:
		c.binHeader(h, statusOK, 0, 0, len(c.srv.opts.Version), 0)
		c.out = append(c.out, c.srv.opts.Version...)
	case opQuit, opQuitQ:
		c.binSuccess(h, quiet, 0)
		c.closeAfterWrite = true
	case opStat:
		c.binStats(h, key)
	}
	return total, nil
}

// binQuiet reports whether op is a quiet variant and whether keyway knows op.
func binQuiet(op byte) (quiet, known bool) {
	switch op {
	case opGetQ, opGetKQ, opGATQ, opGATKQ, opSetQ, opAddQ, opReplaceQ, opDeleteQ,
		opIncrementQ, opDecrementQ, opQuitQ, opFlushQ, opAppendQ, opPrependQ:
		return true, true
	case opGet, opGetK, opGAT, opGATK, opTouch, opSet, opAdd, opReplace, opDelete,
		opIncrement, opDecrement, opQuit, opFlush, opNoop, opVersion, opAppend,
		opPrepend, opStat:
		return false, true
	}
	return false, false
}

// binShapeOK checks the extras, key and body lengths an opcode requires
// (memcached's dispatch_bin_command). A body longer than the opcode reads is
// refused too: memcached would parse its tail as the next request.
func binShapeOK(h binHeader) bool {
	e, k, b := h.extlen, h.keylen, h.bodylen
	switch h.opcode {
	case opNoop, opVersion, opQuit, opQuitQ:
		return e == 0 && k == 0 && b == 0
	case opFlush, opFlushQ:
		return k == 0 && b == e && (e == 0 || e == 4)
	case opGet, opGetQ, opGetK, opGetKQ, opDelete, opDeleteQ:
		return e == 0 && k > 0 && b == k
	case opSet, opSetQ, opAdd, opAddQ, opReplace, opReplaceQ:
		return e == 8 && k > 0 // b >= k+e was checked for every request
	case opAppend, opAppendQ, opPrepend, opPrependQ:
		return e == 0 && k > 0
	case opIncrement, opIncrementQ, opDecrement, opDecrementQ:
		return e == 20 && k > 0 && b == k+e
	case opTouch, opGAT, opGATQ, opGATK, opGATKQ:
		return e == 4 && k > 0 && b == k+e
	case opStat:
		return e == 0 && b == k
	}
	return false
}

// binGet answers get, getk, gat, gatk, touch and their quiet variants.
func (c *conn) binGet(h binHeader, quiet bool, extras, key []byte) {
	op := h.opcode
	touch := op == opTouch || op == opGAT || op == opGATQ || op == opGATK || op == opGATKQ
	var (
		value []byte
		flags uint32
		cas   uint64
		found bool
	)
	if touch {
		// The wire exptime is unsigned: large values are absolute times.
		exptime := int64(binary.BigEndian.Uint32(extras))
		var it store.Item
		var err error
		if op == opTouch {
			// touch is not a get: memcached counts it in touch stats only.
			var status engine.Status
			it, status, err = c.eng.Touch(c.engineKey(key, engine.AccessOther), exptime)
			found = status == engine.Touched
		} else {
			it, found, err = c.eng.GetAndTouch(c.engineKey(key, engine.AccessOther), exptime)
		}
		if err != nil {
			c.binServerError(h, err)
			return
		}
		value, flags, cas = it.Value, it.Flags, it.CAS
	} else if t := c.eng.SwitchTo(key); t != nil {
		// The InnoDB plugin's "get @@name": switch this connection's container and answer with its table.
		c.container = t
		value, found = []byte(t.PluginTableName()), true
	} else {
		it, ok, err := c.getOne(key)
		if err != nil {
			c.binServerError(h, err)
			return
		}
		value, flags, cas, found = it.Value, it.Flags, it.CAS, ok
	}
	if op == opTouch {
		value = nil
	}
	c.srv.prefixes.get(key, found)
	c.binGetReply(h, quiet, key, value, flags, cas, found)
}

// binGetRun answers the run of plain gets (get, getq, getk, getkq) that
// starts at buf[0], as many as are complete in buf, up to multiGetBatch,
// with one engine.GetMulti, as the text door answers a multi-key get: each
// container reads its rows of the run with one WHERE key IN (…) query, so a
// client's getkq … getkq noop pipeline costs one query, not one per key. It
// returns the bytes it answered, or 0 when the run is a single request
// (binGet answers that alone, with the single-key read's single-flight).
//
// The replies are those binGet would write for each request in turn: hits
// and misses come from the batch; a key that is not found while the batch
// met an error is asked again on its own, so an error reaches exactly the
// requests it belongs to (a missing container's key, the keys of a failing
// container) and the others answer as they would have. A request the run
// does not take (another opcode, one cut off at the end of buf, one binGet
// would refuse) ends it and is answered by binaryRequest as usual; a run cut
// across two reads is thus two runs.
func (c *conn) binGetRun(buf []byte) int {
	keys := c.keys[:0]
	n := 0
	for len(keys) < multiGetBatch {
		h, ok := c.binGetAt(buf[n:])
		if !ok {
			break
		}
		start := n + binaryHeaderLen
		if c.eng.SwitchTo(buf[start:start+h.keylen]) != nil {
			break // binGet switches the connection's container; the keys after it go to that container
		}
		keys = append(keys, buf[start:start+h.keylen])
		n = start + h.bodylen
	}
	defer func() { clear(keys); c.keys = keys[:0] }() // they point into the read buffer
	if len(keys) < 2 {
		return 0
	}
	items, found, err := c.getMulti(keys)
	off := 0
	for i, key := range keys {
		h := parseBinHeader(buf[off:])
		off += binaryHeaderLen + h.bodylen
		quiet := h.opcode == opGetQ || h.opcode == opGetKQ
		it, ok := items[i], found[i]
		if err != nil && !ok {
			var kerr error
			if it, ok, kerr = c.getOne(key); kerr != nil {
				c.binServerError(h, kerr)
				continue
			}
		}
		items[i] = store.Item{} // a value written out can go before the run ends
		c.srv.prefixes.get(key, ok)
		c.binGetReply(h, quiet, key, it.Value, it.Flags, it.CAS, ok)
		if c.flushIfFull() != nil {
			break // the write error closes the connection
		}
	}
	return n
}

// binGetAt reports whether b starts with a complete plain get (get, getq,
// getk, getkq) that binaryRequest would hand to binGet unchanged, and its
// header.
func (c *conn) binGetAt(b []byte) (binHeader, bool) {
	if len(b) < binaryHeaderLen || b[0] != binaryRequestMagic || !c.authed {
		return binHeader{}, false
	}
	switch b[1] {
	case opGet, opGetQ, opGetK, opGetKQ:
	default:
		return binHeader{}, false
	}
	h := parseBinHeader(b)
	if h.keylen > maxKeyLen || !binShapeOK(h) || len(b) < binaryHeaderLen+h.bodylen {
		return binHeader{}, false
	}
	return h, true
}

// binGetReply answers a get-family request (get, getk, gat, gatk, touch and
// their quiet variants) with its outcome: a hit carries the flags, the key
// for the K opcodes, and value; a miss is an error reply, with the key and no
// message for the K opcodes, and nothing at all when quiet.
func (c *conn) binGetReply(h binHeader, quiet bool, key, value []byte, flags uint32, cas uint64, found bool) {
	withKey := h.opcode == opGetK || h.opcode == opGetKQ || h.opcode == opGATK || h.opcode == opGATKQ
	if !found {
		switch {
		case quiet:
		case withKey:
			// getk's miss carries the key, and no message.
			c.binHeader(h, statusKeyNotFound, 0, len(key), len(key), 0)
			c.out = append(c.out, key...)
		default:
			c.binError(h, statusKeyNotFound)
		}
		return
	}
	keylen := 0
	if withKey {
		keylen = len(key)
	}
	c.binHeader(h, statusOK, 4, keylen, 4+keylen+len(value), cas)
	c.out = binary.BigEndian.AppendUint32(c.out, flags)
	if withKey {
		c.out = append(c.out, key...)
	}
	c.appendData(value)
}

// binStore answers set, add and replace. A non-zero cas makes any of them a
// compare-and-swap, as in memcached.
func (c *conn) binStore(h binHeader, quiet bool, extras, key, value []byte) {
	flags := binary.BigEndian.Uint32(extras[0:4])
	exptime := int64(binary.BigEndian.Uint32(extras[4:8]))
	var mode engine.Mode
	switch h.opcode {
	case opSet, opSetQ:
		mode = engine.Set
	case opAdd, opAddQ:
		mode = engine.Add
	default:
		mode = engine.Replace
	}
	if h.cas != 0 {
		mode = engine.CAS
	}
	c.srv.prefixes.set(key)
	v := value[:len(value):len(value)] // the engine copies what it keeps (StoreValue)
	status, it, err := c.eng.StoreValue(c.engineKey(key, storeAccess(mode)), v, engine.StoreRequest{Mode: mode, Flags: flags, TTL: exptime, CAS: h.cas, Tally: &c.tally})
	c.binStoreReply(h, quiet, mode, status, it.CAS, err)
}

// binConcat answers append and prepend; a non-zero cas must match.
func (c *conn) binConcat(h binHeader, quiet bool, key, value []byte) {
	mode := engine.Append
	if h.opcode == opPrepend || h.opcode == opPrependQ {
		mode = engine.Prepend
	}
	c.srv.prefixes.set(key)
	v := value[:len(value):len(value)] // the engine copies what it keeps (StoreValue)
	status, it, err := c.eng.StoreValue(c.engineKey(key, engine.AccessOther), v, engine.StoreRequest{Mode: mode, CAS: h.cas, Tally: &c.tally})
	c.binStoreReply(h, quiet, mode, status, it.CAS, err)
}

// binStoreReply maps a storage outcome to memcached's binary statuses: a
// refused add is "exists", a refused replace "not found", anything else
// refused (including an append over the size limit) "not stored".
func (c *conn) binStoreReply(h binHeader, quiet bool, mode engine.Mode, status engine.Status, cas uint64, err error) {
	switch status {
	case engine.Stored:
		c.binSuccess(h, quiet, cas)
	case engine.Exists:
		c.binError(h, statusKeyExists)
	case engine.NotFound:
		c.binError(h, statusKeyNotFound)
	case engine.NotStored, engine.TooLarge:
		switch mode {
		case engine.Add:
			c.binError(h, statusKeyExists)
		case engine.Replace:
			c.binError(h, statusKeyNotFound)
		default:
			c.binError(h, statusNotStored)
		}
	case engine.NoMemory:
		c.srv.noMemory.Add(1)
		c.binError(h, statusNoMemory)
	default:
		c.binServerError(h, err)
	}
}

func (c *conn) binDelete(h binHeader, quiet bool, key []byte) {
	c.srv.prefixes.del(key)
	status, err := c.eng.Delete(c.engineKey(key, engine.AccessOther), engine.DeleteRequest{CompareCAS: h.cas != 0, CAS: h.cas})
	switch status {
	case engine.Deleted:
		c.binSuccess(h, quiet, 0)
	case engine.NotFound:
		c.binError(h, statusKeyNotFound)
	case engine.Exists:
		c.binError(h, statusKeyExists)
	default:
		c.binServerError(h, err)
	}
}

// binArith answers incr and decr: extras are delta, initial (both 64-bit)
// and an expiration; a missing key is created with initial unless the
// expiration is 0xffffffff.
func (c *conn) binArith(h binHeader, quiet bool, extras, key []byte) {
	exp := binary.BigEndian.Uint32(extras[16:20])
	a := engine.Arith{
		Delta:     binary.BigEndian.Uint64(extras[0:8]),
		Initial:   binary.BigEndian.Uint64(extras[8:16]),
		Decr:      h.opcode == opDecrement || h.opcode == opDecrementQ,
		Create:    exp != incrNoCreate,
		CreateTTL: int64(exp),
		CAS:       h.cas,
	}
	res, err := c.eng.IncrDecr(c.engineKey(key, engine.AccessOther), a)
	switch res.Status {
	case engine.Stored:
		if !quiet {
			c.binHeader(h, statusOK, 0, 0, 8, res.Item.CAS)
			c.out = binary.BigEndian.AppendUint64(c.out, res.Value)
		}
	case engine.NotFound:
		c.binError(h, statusKeyNotFound)
	case engine.Exists:
		c.binError(h, statusKeyExists)
	case engine.NonNumeric:
		c.binError(h, statusNonNumeric)
	case engine.NoMemory:
		c.binError(h, statusNoMemory)
	default:
		c.binServerError(h, err)
	}
}

// binStats answers stat: one packet per statistic, key the name and value
// the value, then a packet with neither. The key picks the group as the
// text protocol's "stats <group>" does, matched as memcached 1.6.18 matches
// it: "reset", "settings" and "detail" by prefix, the engine's groups
// (items, slabs, sizes) exactly; "conns" and anything else is not found.
func (c *conn) binStats(h binHeader, group []byte) {
	c.publish()
	w := statSink{c: c, binary: true, opaque: h.opaque}
	switch g := string(group); {
	case g == "":
		c.srv.generalStats(w)
	case strings.HasPrefix(g, "reset"):
		c.srv.resetStats()
	case strings.HasPrefix(g, "settings"):
		c.settingsStats(w)
	case strings.HasPrefix(g, "detail"):
		// The word after "detail" is read by its prefix too ("detail
		// onward" is on); a dump is one statistic named "detailed".
		p := &c.srv.prefixes
		switch word := g[len("detail"):]; {
		case strings.HasPrefix(word, " dump"):
			w.str("detailed", string(p.dump(nil)))
		case strings.HasPrefix(word, " on"):
			p.on.Store(true)
		case strings.HasPrefix(word, " off"):
			p.on.Store(false)
		default:
			c.binError(h, statusKeyNotFound)
			return
		}
	default:
		if !c.srv.engineStats(w, g) {
			c.binError(h, statusKeyNotFound)
			return
		}
	}
	c.binHeader(h, statusOK, 0, 0, 0, 0)
}

// binSuccess writes an empty success reply unless the request was quiet.
func (c *conn) binSuccess(h binHeader, quiet bool, cas uint64) {
	if !quiet {
		c.binHeader(h, statusOK, 0, 0, 0, cas)
	}
}

// binProtocolError refuses a request whose lengths do not fit its opcode and
// closes the connection after the reply, as memcached does: the stream
// cannot be trusted to be framed.
func (c *conn) binProtocolError(h binHeader) {
	c.binError(h, statusInvalid)
	c.closeAfterWrite = true
}

// binError writes an error reply whose body is memcached's message for status.
func (c *conn) binError(h binHeader, status uint16) {
	msg := binStatusText(status)
	c.binHeader(h, status, 0, 0, len(msg), 0)
	c.out = append(c.out, msg...)
}

// binServerError reports an error from the engine with the cause as the
// body; the status says whose fault it is (see engine.KindOf).
func (c *conn) binServerError(h binHeader, err error) {
	status := uint16(statusInternal)
	switch engine.KindOf(err) {
	case engine.ClientFault:
		status = statusInvalid
	case engine.ValueTooLarge:
		status = statusTooLarge
	}
	start := len(c.out)
	c.binHeader(h, status, 0, 0, 0, 0)
	if err != nil {
		c.out = append(c.out, err.Error()...)
	} else {
		c.out = append(c.out, "Internal error"...)
	}
	binary.BigEndian.PutUint32(c.out[start+8:], uint32(len(c.out)-start-binaryHeaderLen))
}

// binStatusText is memcached's message for an error status (write_bin_error).
func binStatusText(status uint16) string {
	switch status {
	case statusKeyNotFound:
		return "Not found"
	case statusKeyExists:
		return "Data exists for key."
	case statusTooLarge:
		return "Too large."
	case statusInvalid:
		return "Invalid arguments"
	case statusNotStored:
		return "Not stored."
	case statusNonNumeric:
		return "Non-numeric server-side value for incr or decr"
	case statusUnknownCommand:
		return "Unknown command"
	case statusNoMemory:
		return "Out of memory"
	case statusAuthError:
		return "Auth failure."
	}
	return "Internal error"
}

// binHeader appends a response header for request h; the caller appends
// extlen bytes of extras, keylen of key and the rest of bodylen.
func (c *conn) binHeader(h binHeader, status uint16, extlen, keylen, bodylen int, cas uint64) {
	c.out = append(c.out,
		binaryResponseMagic, h.opcode,
		byte(keylen>>8), byte(keylen),
		byte(extlen), 0, // datatype: raw bytes
		byte(status>>8), byte(status))
	c.out = binary.BigEndian.AppendUint32(c.out, uint32(bodylen))
	c.out = binary.BigEndian.AppendUint32(c.out, h.opaque)
	c.out = binary.BigEndian.AppendUint64(c.out, cas)
}

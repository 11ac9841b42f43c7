package memcache

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"strconv"
)

// Authentication, as memcached 1.6 offers it: with an auth file (-Y) the text
// protocol's first command must be "set <any> <any> <any> <n>" whose data
// block is "<user> <password>" (proto_text.c, try_read_command_asciiauth);
// with -S the binary protocol authenticates with SASL (proto_bin.c). keyway
// offers SASL PLAIN, checked against the same users.
//
// Before a connection has authenticated, nothing but authentication runs: the
// text protocol answers every other command "CLIENT_ERROR unauthenticated";
// the binary protocol answers every opcode but SASL and version with status
// 0x20 (auth error) and closes, as memcached does. Credentials are compared
// in constant time and never logged or echoed.

// User is an account clients authenticate as.
type User struct {
	Name     string
	Password string
}

// authenticator checks credentials against the configured users. It keeps
// only SHA-256 digests, so a comparison takes the same time whatever the
// lengths and contents of the names and passwords.
type authenticator struct {
	users []userDigest
}

type userDigest struct {
	name, password [sha256.Size]byte
}

func newAuthenticator(users []User) *authenticator {
	if len(users) == 0 {
		return nil
	}
	a := &authenticator{users: make([]userDigest, len(users))}
	for i, u := range users {
		a.users[i] = userDigest{sha256.Sum256([]byte(u.Name)), sha256.Sum256([]byte(u.Password))}
	}
	return a
}

// check reports whether name and password belong to one user. It looks at
// every user, whichever matches.
func (a *authenticator) check(name, password []byte) bool {
	n, p := sha256.Sum256(name), sha256.Sum256(password)
	ok := 0
	for i := range a.users {
		u := &a.users[i]
		ok |= subtle.ConstantTimeCompare(n[:], u.name[:]) & subtle.ConstantTimeCompare(p[:], u.password[:])
	}
	return ok == 1
}

// Limits of memcached's text authentication (proto_text.c).
const (
	maxAuthData    = 16384 // MAX_AUTH_REQ_LEN
	minAuthLine    = 6     // MIN_AUTH_REQ_LEN: a shorter first line closes the connection
	maxAuthLine    = 2048  // a first line longer than this without its end closes the connection
	replyAuthOK    = replyStored
	replyAuthFail  = "CLIENT_ERROR authentication failure\r\n"
	replyUnauthed  = "CLIENT_ERROR unauthenticated\r\n"
	replyAuthLong  = "CLIENT_ERROR auth token too long\r\n"
	replyAuthTerm  = "CLIENT_ERROR bad command line termination\r\n"
	replyAuthToken = "CLIENT_ERROR bad authentication token format\r\n"
)

// textAuth answers a text request on a connection that has not
// authenticated: "set <key> <flags> <exptime> <n>\r\n<user> <password>\r\n"
// authenticates (the key, flags and exptime are ignored and nothing is
// stored); anything else is refused. It returns the bytes it used, or
// needMore.
func (c *conn) textAuth(buf []byte) (int, error) {
	eol := bytes.IndexByte(buf, '\n')
	if eol < 0 {
		if len(buf) > maxAuthLine {
			c.closeAfterWrite = true
			return len(buf), nil
		}
		c.need = len(buf) + 1
		return needMore, nil
	}
	if eol < minAuthLine {
		c.closeAfterWrite = true
		return eol + 1, nil
	}
	line := bytes.TrimSuffix(buf[:eol], []byte("\r"))
	toks := tokenize(line, c.toks[:0])
	if len(toks) < 5 || string(toks[0]) != "set" {
		c.out = append(c.out, replyUnauthed...)
		return eol + 1, nil
	}
	size, err := strconv.ParseUint(string(toks[4]), 10, 32)
	if err != nil {
		c.out = append(c.out, replyUnauthed...)
		return eol + 1, nil
	}
	if size > maxAuthData {
		// As memcached: the line is answered, and the data block that
		// follows is read as commands (and refused).
		c.out = append(c.out, replyAuthLong...)
		return eol + 1, nil
	}
	total := eol + 1 + int(size) + 2
	if len(buf) < total {
		c.need = total
		return needMore, nil
	}
	data := buf[eol+1 : total]
	if string(data[len(data)-2:]) != "\r\n" {
		c.out = append(c.out, replyAuthTerm...)
		return total, nil
	}
	data = data[:len(data)-2]
	user, password, ok := bytes.Cut(data, []byte(" "))
	switch {
	case !ok:
		c.out = append(c.out, replyAuthToken...)
	case c.srv.auth.check(user, password):
		c.authed = true
		c.srv.authCmds.Add(1)
		c.out = append(c.out, replyAuthOK...)
	default:
		c.srv.authCmds.Add(1)
		c.srv.authErrors.Add(1)
		c.out = append(c.out, replyAuthFail...)
	}
	return total, nil
}

// SASL opcodes and statuses (protocol_binary.h).
const (
	opSASLListMechs = 0x20
	opSASLAuth      = 0x21
	opSASLStep      = 0x22

	statusAuthError = 0x20 // PROTOCOL_BINARY_RESPONSE_AUTH_ERROR
	// statusAuthContinue (0x21, AUTH_CONTINUE) asks for another SASL step;
	// PLAIN is one step, so keyway never sends it.
	statusAuthContinue = 0x21

	saslMechs      = "PLAIN"
	maxSASLMechLen = 32   // MAX_SASL_MECH_LEN
	maxSASLData    = 4096 // authzid, authcid and password of a PLAIN exchange
)

// binaryAuthGate runs, with authentication on, before every binary request:
// it answers the SASL opcodes and refuses any other but version until the
// connection has authenticated. done reports that it answered the request,
// using n bytes (or needMore).
func (c *conn) binaryAuthGate(buf []byte, h binHeader) (n int, done bool) {
	switch h.opcode {
	case opSASLListMechs, opSASLAuth, opSASLStep:
		return c.binSASL(buf, h), true
	case opVersion:
		return 0, false
	}
	if c.authed {
		return 0, false
	}
	// As memcached: an auth error, and the connection closes.
	c.binError(h, statusAuthError)
	c.closeAfterWrite = true
	return binaryHeaderLen, true
}

// binSASL answers a SASL opcode: list mechanisms ("PLAIN"), or authenticate
// with PLAIN (authzid NUL authcid NUL password; the authzid is ignored).
func (c *conn) binSASL(buf []byte, h binHeader) int {
	if h.opcode == opSASLListMechs {
		if h.extlen != 0 || h.keylen != 0 || h.bodylen != 0 {
			c.binProtocolError(h)
			return binaryHeaderLen
		}
		c.binHeader(h, statusOK, 0, 0, len(saslMechs), 0)
		c.out = append(c.out, saslMechs...)
		return binaryHeaderLen
	}
	if h.extlen != 0 || h.keylen == 0 {
		c.binProtocolError(h)
		return binaryHeaderLen
	}
	vlen := h.bodylen - h.keylen
	if h.keylen > maxSASLMechLen || vlen > maxSASLData {
		c.binError(h, statusInvalid)
		c.swallow = int64(h.bodylen)
		return binaryHeaderLen
	}
	total := binaryHeaderLen + h.bodylen
	if len(buf) < total {
		c.need = total
		return needMore
	}
	mech := buf[binaryHeaderLen : binaryHeaderLen+h.keylen]
	data := buf[binaryHeaderLen+h.keylen : total]
	c.srv.authCmds.Add(1)
	if h.opcode == opSASLAuth && string(mech) == saslMechs {
		parts := bytes.SplitN(data, []byte{0}, 3)
		if len(parts) == 3 && c.srv.auth.check(parts[1], parts[2]) {
			c.authed = true
			const ok = "Authenticated"
			c.binHeader(h, statusOK, 0, 0, len(ok), 0)
			c.out = append(c.out, ok...)
			return total
		}
	}
	// A wrong password, an unknown mechanism, or a step (PLAIN has none).
	c.srv.authErrors.Add(1)
	c.binError(h, statusAuthError)
	return total
}

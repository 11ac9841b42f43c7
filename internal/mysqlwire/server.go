package mysqlwire

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
)

// This file speaks for the server side: keyway answering an application's driver (client → keyway).

// Account is a user keyway authenticates clients against.
type Account struct {
	User     string
	Password string // plaintext, from keyway's config: keyway verifies either plugin's scramble with it
	Plugin   string // NativePassword or CachingSha2Password; "" = ServerConfig.DefaultPlugin
}

// ServerConfig is what keyway offers a client in the handshake and how it checks the client's credentials.
type ServerConfig struct {
	Version      string // server version string shown to the client
	ConnectionID uint32
	Capabilities uint32 // flags offered; CLIENT_SSL is added when TLS is set
	// ExtCapabilities are the MariaDB extended capabilities offered (ExtProtocolCaps); offering any leaves
	// CLIENT_MYSQL out of Capabilities, as a MariaDB server does.
	ExtCapabilities uint32
	Collation       uint8  // default collation announced (0 = utf8mb4_general_ci, 45)
	Status          uint16 // status flags announced
	TLS             *tls.Config

	// DefaultPlugin is announced in the handshake and used for accounts without a plugin.
	DefaultPlugin string
	// Lookup finds an account by user name.
	Lookup func(user string) (Account, bool)
	// RSAKey returns the key for caching_sha2_password full authentication without TLS; nil (or an error) makes
	// such a client get an error asking for TLS.
	RSAKey func() (*rsa.PrivateKey, error)
	// CachingSha2FullAuth makes caching_sha2_password always run full authentication, as MySQL does when its
	// cache is cold. Off, keyway verifies the fast-path scramble directly: it knows the plaintext password.
	CachingSha2FullAuth bool
	// RemoteHost names the client in "Access denied for user 'x'@'host'".
	RemoteHost string
	// OnDenied, when set, is called when a login fails its password check, before the client is sent ERR 1045:
	// whatever it records is in place before the client can try again.
	OnDenied func()
	// DecoyPlugins are the plugins a user name without an account appears to have. Such a login runs exactly as
	// for an account of that plugin with a random password (auth switch, full authentication, then ERR 1045
	// worded the same), so logins do not tell which names exist. Each unknown name gets one of DecoyPlugins,
	// chosen by a hash of the name under a per-process random seed, so every attempt with a name looks the same
	// (as MySQL's decoy accounts do). Give the plugins the real accounts use. Empty = the plugin of an account
	// without one (DefaultPlugin).
	DecoyPlugins []string
	// RequireTLS refuses a client that did not switch to TLS with ERR 1045, before any password exchange (so the
	// refusal says nothing about the name or the password).
	RequireTLS bool
}

// Handshake is the outcome of a successful ServerHandshake.
type Handshake struct {
	User            string
	DB              string // from CLIENT_CONNECT_WITH_DB; "" = none
	Capabilities    uint32 // negotiated (also stored in Conn.Capabilities)
	ExtCapabilities uint32 // negotiated MariaDB extended capabilities (also in Conn.ExtCapabilities)
	Collation       uint8  // the client's collation
	Account         Account
	Scramble        []byte // the nonce of this connection; COM_CHANGE_USER replies are computed on it
}

// ErrAuth marks an authentication failure; the client has been sent ERR 1045.
var ErrAuth = errors.New("mysqlwire: access denied")

// ServerHandshake runs the server side of connection setup on a fresh connection: it sends the v10 handshake,
// upgrades to TLS when the client asks, reads the client's response and authenticates it (with an auth switch when
// the client answered for another plugin than the account's). On success the final OK has NOT been sent: the caller
// sends it (c.WriteOK) once it has what the session needs, or an ERR. On failure the client has been sent an ERR
// where the protocol allows one.
func ServerHandshake(c *Conn, cfg *ServerConfig) (*Handshake, error) {
	// A stranger gets no more buffer than a handshake response needs (see MaxHandshakePacket).
	saved := c.MaxPacket
	c.MaxPacket = MaxHandshakePacket
	defer func() { c.MaxPacket = saved }()
	scramble, err := NewScramble()
	if err != nil {
		return nil, err
	}
	offered := cfg.Capabilities | BaseCaps
	extOffered := cfg.ExtCapabilities & ExtProtocolCaps
	if extOffered != 0 {
		offered &^= ClientLongPassword // CLIENT_MYSQL: its absence says the reserved bytes carry extended capabilities
	}
	if cfg.TLS != nil {
		offered |= ClientSSL
	} else {
		offered &^= ClientSSL
	}
	plugin := cfg.DefaultPlugin
	if plugin == "" {
		plugin = NativePassword
	}
	collation := cfg.Collation
	if collation == 0 {
		collation = 45
	}
	c.ResetSeq()
	b := c.Begin()
	b = append(b, 10)
	b = append(b, cfg.Version...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, cfg.ConnectionID)
	b = append(b, scramble[:8]...)
	b = append(b, 0, byte(offered), byte(offered>>8), collation, byte(cfg.Status), byte(cfg.Status>>8),
		byte(offered>>16), byte(offered>>24), ScrambleLen+1)
	b = append(b, make([]byte, 6)...)
	b = binary.LittleEndian.AppendUint32(b, extOffered) // reserved (zero) unless extended capabilities are offered
	b = append(b, scramble[8:]...)
	b = append(b, 0)
	b = append(b, plugin...)
	b = append(b, 0)
	if err := c.Finish(b); err != nil {
		return nil, err
	}
	if err := c.FlushBeforeReply(); err != nil { // the greeting goes out with the read of the client's answer
		return nil, err
	}

	p, err := c.readAuthPacket()
	if err != nil {
		return nil, err
	}
	if len(p) < 4 {
		return nil, c.fail(ERMalformedPacket, "08S01", "keyway: handshake response too short")
	}
	caps := binary.LittleEndian.Uint32(p)
	if caps&ClientProtocol41 == 0 {
		return nil, c.fail(ERHandshake, "08S01", "keyway: the client must speak the MySQL 4.1 protocol or later (CLIENT_PROTOCOL_41)")
	}
	if caps&ClientSSL != 0 {
		if cfg.TLS == nil {
			return nil, c.fail(ERHandshake, "08S01", "keyway: the client asked for TLS but keyway has no tls_cert/tls_key in [sql]")
		}
		if len(p) == 32 { // SSLRequest: the full response follows over TLS
			if err := c.upgradeTLS(cfg.TLS, true); err != nil {
				return nil, err
			}
			if p, err = c.readAuthPacket(); err != nil {
				return nil, err
			}
			if len(p) < 4 {
				return nil, c.fail(ERMalformedPacket, "08S01", "keyway: handshake response too short")
			}
			caps = binary.LittleEndian.Uint32(p)
		}
	}
	hs, clientPlugin, reply, err := parseHandshakeResponse(p, caps)
	if err != nil {
		return nil, c.fail(ERMalformedPacket, "08S01", "keyway: malformed handshake response")
	}
	hs.Capabilities = caps & offered
	if extOffered != 0 && caps&ClientLongPassword == 0 {
		hs.ExtCapabilities = binary.LittleEndian.Uint32(p[28:32]) & extOffered // the filler's last four bytes
	}
	c.ExtCapabilities = hs.ExtCapabilities
	hs.Scramble = scramble
	c.Capabilities = hs.Capabilities
	if clientPlugin == "" && caps&ClientPluginAuth == 0 {
		clientPlugin = NativePassword
	}
	if cfg.RequireTLS && !c.TLS {
		yes := "NO"
		if len(reply) > 0 {
			yes = "YES"
		}
		return nil, c.fail(ERAccessDenied, "28000", "Access denied for user '%s'@'%s' (using password: %s): this server requires TLS; connect with TLS (ssl)",
			hs.User, cfg.RemoteHost, yes)
	}
	acct, err := ServerAuth(c, cfg, hs.User, scramble, clientPlugin, reply)
	if err != nil {
		return nil, err
	}
	hs.Account = acct
	return hs, nil
}

// parseHandshakeResponse decodes a HandshakeResponse41 payload.
func parseHandshakeResponse(p []byte, caps uint32) (hs *Handshake, plugin string, reply []byte, err error) {
	if len(p) < 32 {
		return nil, "", nil, ErrMalformed
	}
	hs = &Handshake{Collation: p[8]}
	rest := p[32:]
	user, rest, ok := readNul(rest)
	if !ok {
		return nil, "", nil, ErrMalformed
	}
	hs.User = string(user)
	switch {
	case caps&ClientPluginAuthLenenc != 0:
		reply, rest, ok = readLenEncString(rest)
	case caps&ClientSecureConnection != 0:
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return nil, "", nil, ErrMalformed
		}
		reply, rest, ok = rest[1:1+int(rest[0])], rest[1+int(rest[0]):], true
	default:
		reply, rest, ok = readNul(rest)
	}
	if !ok {
		return nil, "", nil, ErrMalformed
	}
	reply = append([]byte(nil), reply...) // p is the Conn's buffer
	if caps&ClientConnectWithDB != 0 && len(rest) > 0 {
		db, r, ok := readNul(rest)
		if !ok { // some clients omit the last NUL
			db, r = rest, nil
		}
		hs.DB, rest = string(db), r
	}
	if caps&ClientPluginAuth != 0 && len(rest) > 0 {
		name, _, ok := readNul(rest)
		if !ok {
			name = rest
		}
		plugin = string(name)
	}
	return hs, plugin, reply, nil
}

// ServerAuth authenticates user (server side) after the client sent reply for clientPlugin on scramble: in the
// handshake, or in COM_CHANGE_USER. It switches the client to the account's plugin when they differ and runs
// caching_sha2_password fast or full authentication. On success the final OK has NOT been sent. On failure the
// client has been sent ERR 1045 and the error wraps ErrAuth (or is an I/O error).
func ServerAuth(c *Conn, cfg *ServerConfig, user string, scramble []byte, clientPlugin string, reply []byte) (Account, error) {
	acct, found := Account{}, false
	if cfg.Lookup != nil {
		acct, found = cfg.Lookup(user)
	}
	if !found {
		var err error
		if acct, err = decoyAccount(cfg, user); err != nil {
			return Account{}, err
		}
	}
	acct, err := authenticate(c, cfg, acct, user, scramble, clientPlugin, reply)
	if err == nil && !found { // a decoy's random password cannot match; never let one in regardless
		return Account{}, c.deny(cfg, user, true)
	}
	return acct, err
}

// decoySeed keys the choice of a decoy account's plugin, so it cannot be predicted from outside the process.
var decoySeed = maphash.MakeSeed()

// decoyAccount is the account an unknown user name is authenticated against: a plugin from cfg.DecoyPlugins chosen
// by the name, and a random password nothing matches.
func decoyAccount(cfg *ServerConfig, user string) (Account, error) {
	var pw [32]byte
	if _, err := rand.Read(pw[:]); err != nil {
		return Account{}, fmt.Errorf("mysqlwire: random decoy password: %w", err)
	}
	a := Account{User: user, Password: hex.EncodeToString(pw[:])}
	if n := len(cfg.DecoyPlugins); n > 0 {
		a.Plugin = cfg.DecoyPlugins[maphash.String(decoySeed, user)%uint64(n)]
	}
	return a, nil
}

// authenticate is ServerAuth against acct, a real account or a decoy.
func authenticate(c *Conn, cfg *ServerConfig, acct Account, user string, scramble []byte, clientPlugin string, reply []byte) (Account, error) {
	want := acct.Plugin
	if want == "" {
		want = cfg.DefaultPlugin
	}
	if want == "" {
		want = NativePassword
	}
	if want != NativePassword && want != CachingSha2Password {
		return Account{}, c.deny(cfg, user, len(reply) > 0)
	}
	if clientPlugin != want {
		if c.Capabilities&ClientPluginAuth == 0 {
			return Account{}, c.deny(cfg, user, len(reply) > 0)
		}
		// Auth switch request: 0xfe, plugin name, the nonce (NUL-terminated as servers send it).
		b := append(c.Begin(), HeaderEOF)
		b = append(b, want...)
		b = append(b, 0)
		b = append(b, scramble...)
		b = append(b, 0)
		if err := c.Finish(b); err != nil {
			return Account{}, err
		}
		if err := c.FlushBeforeReply(); err != nil {
			return Account{}, err
		}
		p, err := c.readAuthPacket()
		if err != nil {
			return Account{}, err
		}
		reply = append([]byte(nil), p...)
	}
	switch want {
	case NativePassword:
		if !checkScramble(NativePassword, scramble, acct.Password, reply) {
			return Account{}, c.deny(cfg, user, len(reply) > 0)
		}
		return acct, nil
	}
	// caching_sha2_password.
	if acct.Password == "" {
		if len(reply) != 0 {
			return Account{}, c.deny(cfg, user, true)
		}
		return acct, nil
	}
	if len(reply) == 0 {
		return Account{}, c.deny(cfg, user, false)
	}
	if !cfg.CachingSha2FullAuth {
		if !checkScramble(CachingSha2Password, scramble, acct.Password, reply) {
			return Account{}, c.deny(cfg, user, true)
		}
		if err := c.writeAuthMore([]byte{3}); err != nil { // fast_auth_success; the caller's OK follows
			return Account{}, err
		}
		return acct, nil
	}
	if err := c.writeAuthMore([]byte{4}); err != nil { // perform_full_authentication
		return Account{}, err
	}
	p, err := c.readAuthPacket()
	if err != nil {
		return Account{}, err
	}
	var password string
	switch {
	case c.TLS:
		password = string(trimNul(p))
	case len(p) == 1 && p[0] == 2: // request public key
		key, kerr := rsaKey(cfg)
		if kerr != nil {
			return Account{}, c.fail(ERAccessDenied, "28000", "keyway: caching_sha2_password full authentication needs TLS here (%v): connect with TLS, or use an account with mysql_native_password", kerr)
		}
		pemKey, err := PublicKeyPEM(key)
		if err != nil {
			return Account{}, err
		}
		if err := c.writeAuthMore(pemKey); err != nil {
			return Account{}, err
		}
		if p, err = c.readAuthPacket(); err != nil {
			return Account{}, err
		}
		if password, err = DecryptPassword(p, scramble, key); err != nil {
			return Account{}, c.deny(cfg, user, true)
		}
	default:
		// An RSA-encrypted password from a client that already had keyway's key, or cleartext without TLS
		// (refused: it would have crossed the network readable).
		key, kerr := rsaKey(cfg)
		if kerr != nil || len(p) != key.Size() {
			return Account{}, c.fail(ERAccessDenied, "28000", "keyway: caching_sha2_password full authentication without TLS needs the RSA public key exchange: connect with TLS (or let the client request the server's public key)")
		}
		if password, err = DecryptPassword(p, scramble, key); err != nil {
			return Account{}, c.deny(cfg, user, true)
		}
	}
	if len(password) != len(acct.Password) || password != acct.Password {
		return Account{}, c.deny(cfg, user, true)
	}
	return acct, nil
}

func rsaKey(cfg *ServerConfig) (*rsa.PrivateKey, error) {
	if cfg.RSAKey == nil {
		return nil, errors.New("no RSA key configured")
	}
	k, err := cfg.RSAKey()
	if err == nil && k == nil {
		err = errors.New("no RSA key configured")
	}
	return k, err
}

func trimNul(p []byte) []byte {
	for i, b := range p {
		if b == 0 {
			return p[:i]
		}
	}
	return p
}

// readAuthPacket reads a client's packet during authentication (server side). A packet over c.MaxPacket or out of
// order gets the ERR MariaDB sends for it, without its body being read; the caller then closes the connection.
func (c *Conn) readAuthPacket() ([]byte, error) {
	p, err := c.ReadPacket()
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, ErrPacketTooLarge):
		c.Discard()
		limit := c.MaxPacket
		if limit <= 0 {
			limit = DefaultMaxPacket
		}
		_ = c.WriteError(NewError(ERNetPacketTooLarge, "08S01",
			"Got a packet bigger than 'max_allowed_packet' bytes (keyway accepts %d bytes here)", limit))
	case errors.Is(err, ErrPacketsOutOfOrder):
		c.Discard()
		_ = c.WriteError(NewError(ERNetPacketsOutOfOrder, "08S01", "Got packets out of order"))
	}
	return nil, err
}

// writeAuthMore sends an AuthMoreData packet (0x01 + data) and flushes.
func (c *Conn) writeAuthMore(data []byte) error {
	if err := c.Finish(append(append(c.Begin(), HeaderAuthMore), data...)); err != nil {
		return err
	}
	return c.Flush()
}

// deny tells cfg.OnDenied, then sends ERR 1045 as MySQL words it and returns an error wrapping ErrAuth.
func (c *Conn) deny(cfg *ServerConfig, user string, usingPassword bool) error {
	if cfg.OnDenied != nil {
		cfg.OnDenied()
	}
	host := cfg.RemoteHost
	yes := "NO"
	if usingPassword {
		yes = "YES"
	}
	e := NewError(ERAccessDenied, "28000", "Access denied for user '%s'@'%s' (using password: %s)", user, host, yes)
	if err := c.WriteError(e); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s", ErrAuth, e.Message)
}

// fail sends an ERR with the given code and returns it as the error. The message should say what to do.
func (c *Conn) fail(code uint16, state, format string, args ...any) error {
	e := NewError(code, state, format, args...)
	if err := c.WriteError(e); err != nil {
		return err
	}
	if code == ERAccessDenied {
		return fmt.Errorf("%w: %s", ErrAuth, e.Message)
	}
	return e
}

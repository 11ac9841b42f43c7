package mysqlwire

import (
	"crypto/rsa"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
)

// This file speaks for the client side: keyway logging in to a backend (keyway → MariaDB/MySQL).

// ClientConfig is how keyway logs in to a backend.
type ClientConfig struct {
	User     string
	Password string
	DB       string // "" = no default database
	// Capabilities are requested beyond BaseCaps (typically a client's ProtocolCaps); the server's offer masks them.
	Capabilities uint32
	// ExtCapabilities are the MariaDB extended capabilities requested (ExtProtocolCaps); the server's offer masks
	// them. Asking for any leaves CLIENT_MYSQL out of the response, as libmariadb does.
	ExtCapabilities uint32
	Collation       uint8 // 0 = utf8mb4_general_ci (45)
	// TLS, when set, switches the connection to TLS (SSLRequest, then tls.Client) before the handshake response.
	// A server that does not offer TLS is then an error wrapping ErrNoTLS, unless TLSOptional is set: then the login
	// continues in plaintext (MySQL's ssl-mode PREFERRED). Whether the server's certificate is verified is decided
	// by TLS itself (RootCAs, ServerName, InsecureSkipVerify, VerifyConnection).
	TLS         *tls.Config
	TLSOptional bool
	// ServerPubKey encrypts the password in caching_sha2_password full authentication without TLS; when nil keyway
	// asks the server for its key (trusting the network path to the backend, as get_server_public_key=1 does). Over
	// TLS the password goes in clear inside the TLS channel and no key is fetched. Without TLS the password never
	// travels in clear: RSA or nothing.
	ServerPubKey *rsa.PublicKey
}

// ErrNoTLS says TLS was required but the server does not offer it (its handshake lacks CLIENT_SSL).
var ErrNoTLS = errors.New("mysqlwire: the server does not offer TLS")

// ServerInfo is what a backend announced in its handshake.
type ServerInfo struct {
	Version         string
	ConnectionID    uint32
	Capabilities    uint32 // offered by the server
	ExtCapabilities uint32 // MariaDB extended capabilities offered by the server (none from MySQL)
	Collation       uint8
	Status          uint16
}

// ReadServerHandshake reads a server's v10 handshake (client side). An ERR instead (too many connections, host
// blocked) is returned as *Error.
func ReadServerHandshake(c *Conn) (*ServerInfo, []byte, string, error) {
	c.ResetSeq()
	p, err := c.ReadPacket()
	if err != nil {
		return nil, nil, "", err
	}
	if len(p) > 0 && p[0] == HeaderERR {
		return nil, nil, "", ParseError(p)
	}
	if len(p) < 1 || p[0] != 10 {
		return nil, nil, "", fmt.Errorf("%w: server handshake version is not 10", ErrMalformed)
	}
	version, rest, ok := readNul(p[1:])
	if !ok || len(rest) < 4+8+1+2 {
		return nil, nil, "", fmt.Errorf("%w: server handshake too short", ErrMalformed)
	}
	info := &ServerInfo{Version: string(version), ConnectionID: binary.LittleEndian.Uint32(rest)}
	scramble := append([]byte(nil), rest[4:12]...)
	rest = rest[13:]
	info.Capabilities = uint32(binary.LittleEndian.Uint16(rest))
	rest = rest[2:]
	plugin := ""
	if len(rest) >= 16 {
		info.Collation = rest[0]
		info.Status = binary.LittleEndian.Uint16(rest[1:])
		info.Capabilities |= uint32(binary.LittleEndian.Uint16(rest[3:])) << 16
		authLen := int(rest[5])
		if info.Capabilities&ClientLongPassword == 0 { // no CLIENT_MYSQL: a MariaDB server, extended capabilities
			info.ExtCapabilities = binary.LittleEndian.Uint32(rest[12:16])
		}
		rest = rest[16:]
		if info.Capabilities&ClientSecureConnection != 0 {
			n := max(13, authLen-8)
			if n > len(rest) {
				n = len(rest)
			}
			scramble = append(scramble, trimNul(rest[:n])...)
			rest = rest[n:]
		}
		if info.Capabilities&ClientPluginAuth != 0 {
			name, _, ok := readNul(rest)
			if !ok {
				name = rest
			}
			plugin = string(name)
		}
	}
	return info, scramble, plugin, nil
}

// ClientHandshake logs in to a backend on a fresh connection (client side): it reads the handshake, upgrades to
// TLS when configured, sends the response and answers auth switches and caching_sha2_password's fast or full
// authentication. On success c.Capabilities holds the negotiated flags. A rejection by the server is an *Error.
func ClientHandshake(c *Conn, cfg *ClientConfig) (*ServerInfo, error) {
	info, scramble, plugin, err := ReadServerHandshake(c)
	if err != nil {
		return nil, err
	}
	need := ClientProtocol41 | ClientSecureConnection
	if info.Capabilities&need != need {
		return nil, fmt.Errorf("mysqlwire: server %q lacks the 4.1 protocol with secure authentication: keyway needs MySQL 5.5+ or MariaDB", info.Version)
	}
	caps := (BaseCaps | cfg.Capabilities) & info.Capabilities
	caps &^= ClientSSL | ClientConnectWithDB | ClientConnectAttrs
	c.ExtCapabilities = cfg.ExtCapabilities & ExtProtocolCaps & info.ExtCapabilities
	if c.ExtCapabilities != 0 {
		caps &^= ClientLongPassword
	}
	if cfg.DB != "" {
		caps |= ClientConnectWithDB & info.Capabilities
	}
	collation := cfg.Collation
	if collation == 0 {
		collation = 45
	}
	if cfg.TLS != nil {
		switch {
		case info.Capabilities&ClientSSL != 0:
			caps |= ClientSSL
			if err := sslRequest(c, caps, collation, cfg.TLS); err != nil {
				return nil, err
			}
		case !cfg.TLSOptional:
			return nil, fmt.Errorf("%w (server %q)", ErrNoTLS, info.Version)
		}
	}
	c.Capabilities = caps
	if plugin != NativePassword && plugin != CachingSha2Password {
		plugin = NativePassword // and expect a switch
	}
	reply, _ := scrambleFor(plugin, scramble, cfg.Password)

	b := appendResponseHead(c.Begin(), caps, collation, c.ExtCapabilities)
	b = append(b, cfg.User...)
	b = append(b, 0)
	if caps&ClientPluginAuthLenenc != 0 {
		b = AppendLenEnc(b, uint64(len(reply)))
	} else {
		b = append(b, byte(len(reply)))
	}
	b = append(b, reply...)
	if caps&ClientConnectWithDB != 0 {
		b = append(b, cfg.DB...)
		b = append(b, 0)
	}
	if caps&ClientPluginAuth != 0 {
		b = append(b, plugin...)
		b = append(b, 0)
	}
	if err := c.Finish(b); err != nil {
		return nil, err
	}
	if err := c.Flush(); err != nil {
		return nil, err
	}
	if err := clientAuthLoop(c, cfg, plugin, scramble); err != nil {
		return nil, err
	}
	return info, nil
}

// ClientStartTLS switches a fresh connection whose handshake info was just read (ReadServerHandshake) to TLS:
// it sends an SSLRequest and runs the TLS handshake with cfg, and nothing more (no login). keyway's health check
// uses it to verify a backend's certificate without credentials. A server that does not offer TLS is ErrNoTLS.
func ClientStartTLS(c *Conn, info *ServerInfo, cfg *tls.Config) error {
	if info.Capabilities&ClientSSL == 0 {
		return fmt.Errorf("%w (server %q)", ErrNoTLS, info.Version)
	}
	return sslRequest(c, (BaseCaps&info.Capabilities)|ClientSSL, 45, cfg)
}

// sslRequest sends the SSLRequest packet (the first 32 bytes of a handshake response, CLIENT_SSL set in caps) and
// runs the TLS handshake over the connection.
func sslRequest(c *Conn, caps uint32, collation uint8, cfg *tls.Config) error {
	if err := c.Finish(appendResponseHead(c.Begin(), caps, collation, c.ExtCapabilities)); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return err
	}
	return c.upgradeTLS(cfg, false)
}

// appendResponseHead appends the first 32 bytes of a handshake response (the whole of an SSLRequest): capabilities,
// the largest packet, the collation and 23 filler bytes, whose last four carry MariaDB's extended capabilities.
func appendResponseHead(b []byte, caps uint32, collation uint8, ext uint32) []byte {
	b = binary.LittleEndian.AppendUint32(b, caps)
	b = binary.LittleEndian.AppendUint32(b, MaxPayload)
	b = append(b, collation)
	b = append(b, make([]byte, 19)...)
	return binary.LittleEndian.AppendUint32(b, ext)
}

// clientAuthLoop reads the server's answers until OK or ERR, answering switches and caching_sha2 requests.
func clientAuthLoop(c *Conn, cfg *ClientConfig, plugin string, scramble []byte) error {
	for range 8 {
		p, err := c.ReadPacket()
		if err != nil {
			return err
		}
		if len(p) == 0 {
			return fmt.Errorf("%w: empty packet during authentication", ErrMalformed)
		}
		switch p[0] {
		case HeaderOK:
			return nil
		case HeaderERR:
			return ParseError(p)
		case HeaderEOF: // auth switch request
			name, data, ok := readNul(p[1:])
			if !ok {
				name, data = p[1:], nil
			}
			plugin = string(name)
			scramble = append([]byte(nil), trimNul(data)...)
			var reply []byte
			switch plugin {
			case ClearPassword:
				if !c.TLS {
					return errors.New("mysqlwire: the backend asks for the cleartext password without TLS: keyway refuses to send it; configure the account with mysql_native_password or caching_sha2_password")
				}
				reply = append([]byte(cfg.Password), 0)
			default:
				var ok bool
				if reply, ok = scrambleFor(plugin, scramble, cfg.Password); !ok {
					return fmt.Errorf("mysqlwire: the backend asks for auth plugin %q: keyway speaks mysql_native_password and caching_sha2_password; change the backend account's plugin", plugin)
				}
			}
			if err := c.WritePacket(reply); err != nil {
				return err
			}
			if err := c.Flush(); err != nil {
				return err
			}
		case HeaderAuthMore:
			if plugin != CachingSha2Password || len(p) < 2 {
				return fmt.Errorf("%w: unexpected auth data for plugin %q", ErrMalformed, plugin)
			}
			switch p[1] {
			case 3: // fast auth success: OK follows
				continue
			case 4: // full authentication
				if err := clientFullAuth(c, cfg, scramble); err != nil {
					return err
				}
			default:
				return fmt.Errorf("%w: unknown caching_sha2_password state %d", ErrMalformed, p[1])
			}
		default:
			return fmt.Errorf("%w: unexpected packet 0x%02x during authentication", ErrMalformed, p[0])
		}
	}
	return fmt.Errorf("%w: authentication does not end", ErrMalformed)
}

// clientFullAuth sends the password for caching_sha2_password full authentication: in clear over TLS, else
// RSA-encrypted with the server's public key (requested when not configured).
func clientFullAuth(c *Conn, cfg *ClientConfig, scramble []byte) error {
	var out []byte
	if c.TLS {
		out = append([]byte(cfg.Password), 0)
	} else {
		pub := cfg.ServerPubKey
		if pub == nil {
			if err := c.WritePacket([]byte{2}); err != nil {
				return err
			}
			if err := c.Flush(); err != nil {
				return err
			}
			p, err := c.ReadPacket()
			if err != nil {
				return err
			}
			if len(p) > 0 && p[0] == HeaderERR {
				return ParseError(p)
			}
			if len(p) < 2 || p[0] != HeaderAuthMore {
				return fmt.Errorf("%w: expected the server's public key", ErrMalformed)
			}
			if pub, err = ParsePublicKeyPEM(p[1:]); err != nil {
				return err
			}
		}
		var err error
		if out, err = EncryptPassword(cfg.Password, scramble, pub); err != nil {
			return fmt.Errorf("mysqlwire: encrypt password for caching_sha2_password: %w", err)
		}
	}
	if err := c.WritePacket(out); err != nil {
		return err
	}
	return c.Flush()
}

// WriteCommand sends a one-packet command (client side): it starts a new exchange (sequence id 0), buffers the
// command byte and arg, and flushes.
func (c *Conn) WriteCommand(cmd byte, arg []byte) error {
	c.ResetSeq()
	b := append(c.Begin(), cmd)
	if err := c.Finish(append(b, arg...)); err != nil {
		return err
	}
	return c.Flush()
}

// ReadOK reads a reply that must be a single OK (or ERR, returned as *Error) and returns its status flags.
func (c *Conn) ReadOK() (uint16, error) {
	p, err := c.ReadPacket()
	if err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, fmt.Errorf("%w: empty reply", ErrMalformed)
	}
	switch p[0] {
	case HeaderOK:
		st, _ := OKStatus(p)
		return st, nil
	case HeaderERR:
		return 0, ParseError(p)
	}
	return 0, fmt.Errorf("%w: expected OK, got packet 0x%02x", ErrMalformed, p[0])
}

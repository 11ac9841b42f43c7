package backend

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/keywaydb/keyway/internal/mysqlwire"
)

// The values of GroupOptions.TLS: how keyway's own connections to a group use TLS, after MySQL's ssl-mode.
const (
	// TLSOff never uses TLS (ssl-mode DISABLED).
	TLSOff = "off"
	// TLSPreferred uses TLS when the server offers it, without verifying its certificate, and plaintext otherwise
	// (ssl-mode PREFERRED, the MySQL and MariaDB clients' default).
	TLSPreferred = "preferred"
	// TLSRequired fails when the server does not offer TLS; the certificate is not verified (ssl-mode REQUIRED).
	TLSRequired = "required"
	// TLSVerify requires TLS and verifies the server's certificate against TLSCA (the system roots when empty):
	// its chain and its name — TLSServerName, else the host of the primary (ssl-mode VERIFY_IDENTITY). A primary
	// on a unix socket has no host, so without TLSServerName only the chain is verified (ssl-mode VERIFY_CA).
	TLSVerify = "verify"
)

// DefaultTLS is the mode of a GroupOptions without one; the config's default is the same.
const DefaultTLS = TLSPreferred

// TLSError says keyway's TLS policy for a group (GroupOptions.TLS, the [[groups]] keys tls, tls_ca and
// tls_server_name) could not be met: the server does not offer TLS, its certificate does not verify, or tls_ca
// cannot be read.
type TLSError struct {
	Group, Mode string
	Err         error
}

func (e *TLSError) Error() string {
	var hint string
	var ve *tls.CertificateVerificationError
	switch {
	case errors.Is(e.Err, mysqlwire.ErrNoTLS):
		hint = "enable TLS on the server (ssl_cert, ssl_key) or set tls = \"preferred\" or \"off\" for this group"
	case errors.As(e.Err, &ve):
		hint = "set tls_ca to the PEM file of the CA that signed the server's certificate, and tls_server_name to a name in it if the primary's host is not"
	default:
		hint = "fix tls_ca or set tls = \"required\", \"preferred\" or \"off\" for this group"
	}
	return "[[groups]] name = " + strconv.Quote(e.Group) + " tls = " + strconv.Quote(e.Mode) + ": " + e.Err.Error() + ": " + hint
}
func (e *TLSError) Unwrap() error { return e.Err }

// tlsConfig builds the client TLS configuration of a group from its options: nil for TLSOff. Verification, when
// the mode asks for it, happens in VerifyConnection (InsecureSkipVerify only turns off crypto/tls's own check, whose
// error would not name the group), so the same configuration gives the same clear error in keyway's own handshake
// and in go-sql-driver's.
func (o *GroupOptions) tlsConfig() (*tls.Config, error) {
	switch o.TLS {
	case TLSOff:
		return nil, nil
	case TLSPreferred, TLSRequired:
		return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, nil
	case TLSVerify:
	default:
		return nil, &TLSError{Group: o.Name, Mode: o.TLS, Err: errors.New(`unknown mode: want "off", "preferred", "required" or "verify"`)}
	}
	var roots *x509.CertPool // nil: the system roots
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, &TLSError{Group: o.Name, Mode: o.TLS, Err: fmt.Errorf("tls_ca: %w", err)}
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, &TLSError{Group: o.Name, Mode: o.TLS, Err: fmt.Errorf("tls_ca %q holds no PEM certificate", o.TLSCA)}
		}
	}
	name := o.TLSServerName
	if name == "" && o.Primary.Network != "unix" {
		host, _, err := net.SplitHostPort(o.Primary.Address)
		if err != nil {
			return nil, &TLSError{Group: o.Name, Mode: o.TLS, Err: fmt.Errorf("primary %q has no host to verify: %w", o.Primary.Address, err)}
		}
		name = host
	}
	group, mode, ca := o.Name, o.TLS, o.TLSCA
	if ca == "" {
		ca = "the system roots"
	}
	return &tls.Config{
		InsecureSkipVerify: true, // verified below
		MinVersion:         tls.VersionTLS12,
		ServerName:         name, // SNI; "" for a unix socket without tls_server_name
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return &TLSError{Group: group, Mode: mode, Err: errors.New("the server sent no certificate")}
			}
			opts := x509.VerifyOptions{Roots: roots, DNSName: name, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return &TLSError{Group: group, Mode: mode, Err: &tls.CertificateVerificationError{
					UnverifiedCertificates: cs.PeerCertificates,
					Err:                    fmt.Errorf("server certificate does not verify against %s: %w", ca, err),
				}}
			}
			return nil
		},
	}, nil
}

// tlsFailure turns an error of a handshake with the group into a *TLSError where TLS is the cause: the server does
// not offer TLS the mode requires, or its certificate did not verify. Other errors pass unchanged.
func (g *Group) tlsFailure(err error) error {
	var te *TLSError
	if errors.As(err, &te) {
		return te
	}
	if errors.Is(err, mysqlwire.ErrNoTLS) {
		return &TLSError{Group: g.cfg.Name, Mode: g.cfg.TLS, Err: err}
	}
	return err
}

// requireTLSOffer is DialWritable's check for modes that require TLS: it reads the server's handshake off nc and
// fails with a *TLSError when it lacks CLIENT_SSL, so a database/sql pool reports the group and the key rather than
// go-sql-driver's bare ErrNoTLS. The returned conn replays the handshake to the driver.
func (g *Group) requireTLSOffer(nc net.Conn, deadline time.Time) (net.Conn, error) {
	_ = nc.SetReadDeadline(deadline)
	defer func() { _ = nc.SetReadDeadline(time.Time{}) }()
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return nil, err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	if n > mysqlwire.MaxHandshakePacket {
		return nil, fmt.Errorf("%w: server handshake of %d bytes", mysqlwire.ErrMalformed, n)
	}
	pkt := make([]byte, 4+n)
	copy(pkt, hdr[:])
	if _, err := io.ReadFull(nc, pkt[4:]); err != nil {
		return nil, err
	}
	info, _, _, err := mysqlwire.ReadServerHandshake(mysqlwire.NewConnRW(bytes.NewReader(pkt), io.Discard))
	if err != nil {
		return nil, err
	}
	if info.Capabilities&mysqlwire.ClientSSL == 0 {
		return nil, &TLSError{Group: g.cfg.Name, Mode: g.cfg.TLS, Err: fmt.Errorf("%w (server %q)", mysqlwire.ErrNoTLS, info.Version)}
	}
	return mysqlwire.NewPrefixConn(nc, pkt), nil
}

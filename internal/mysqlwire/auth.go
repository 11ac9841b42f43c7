package mysqlwire

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// ScrambleLen is the length of the nonce both auth plugins hash the password with.
const ScrambleLen = 20

// NewScramble returns a fresh 20-byte nonce of printable bytes other than '$' (never NUL: the handshake carries it
// NUL-terminated), as MySQL servers generate it.
func NewScramble() ([]byte, error) {
	s := make([]byte, ScrambleLen)
	if _, err := rand.Read(s); err != nil {
		return nil, fmt.Errorf("mysqlwire: random scramble: %w", err)
	}
	for i, b := range s {
		b = b%94 + 33
		if b == '$' {
			b++
		}
		s[i] = b
	}
	return s, nil
}

// NativeScramble is the mysql_native_password reply a client sends: SHA1(pw) XOR SHA1(scramble, SHA1(SHA1(pw))).
// An empty password gives an empty reply.
func NativeScramble(scramble []byte, password string) []byte {
	return mysql.CalcNativePassword(scramble, []byte(password))
}

// CachingSha2Scramble is the caching_sha2_password fast-path reply a client sends:
// SHA256(pw) XOR SHA256(SHA256(SHA256(pw)), scramble). An empty password gives an empty reply.
func CachingSha2Scramble(scramble []byte, password string) []byte {
	return mysql.CalcCachingSha2Password(scramble, []byte(password))
}

// scrambleFor computes the reply for plugin; ok is false for a plugin keyway does not speak.
func scrambleFor(plugin string, scramble []byte, password string) (reply []byte, ok bool) {
	switch plugin {
	case NativePassword, "":
		return NativeScramble(scramble, password), true
	case CachingSha2Password:
		return CachingSha2Scramble(scramble, password), true
	}
	return nil, false
}

// checkScramble verifies a client's reply in constant time.
func checkScramble(plugin string, scramble []byte, password string, reply []byte) bool {
	want, ok := scrambleFor(plugin, scramble, password)
	if !ok {
		return false
	}
	return len(want) == len(reply) && subtle.ConstantTimeCompare(want, reply) == 1
}

// EncryptPassword is the client side of caching_sha2_password full authentication without TLS: the password,
// NUL-terminated, XORed with the scramble and RSA-OAEP(SHA1)-encrypted with the server's public key.
func EncryptPassword(password string, scramble []byte, pub *rsa.PublicKey) ([]byte, error) {
	return mysql.EncryptPassword(password, scramble, pub)
}

// DecryptPassword is the server side of EncryptPassword. It returns the cleartext password.
func DecryptPassword(cipher, scramble []byte, key *rsa.PrivateKey) (string, error) {
	plain, err := rsa.DecryptOAEP(sha1.New(), nil, key, cipher, nil)
	if err != nil {
		return "", fmt.Errorf("mysqlwire: decrypt password: %w", err)
	}
	if len(scramble) == 0 {
		return "", errors.New("mysqlwire: decrypt password: empty scramble")
	}
	for i := range plain {
		plain[i] ^= scramble[i%len(scramble)]
	}
	if i := bytes.IndexByte(plain, 0); i >= 0 {
		plain = plain[:i]
	}
	return string(plain), nil
}

// PublicKeyPEM encodes key's public half the way MySQL servers send it (PKIX, "PUBLIC KEY").
func PublicKeyPEM(key *rsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("mysqlwire: encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePublicKeyPEM decodes a server's RSA public key (PKIX or PKCS#1).
func ParsePublicKeyPEM(data []byte) (*rsa.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("mysqlwire: server public key: no PEM block")
	}
	if k, err := x509.ParsePKIXPublicKey(block.Bytes); err == nil {
		if rk, ok := k.(*rsa.PublicKey); ok {
			return rk, nil
		}
		return nil, errors.New("mysqlwire: server public key is not RSA")
	}
	k, err := x509.ParsePKCS1PublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("mysqlwire: server public key: %w", err)
	}
	return k, nil
}

package mysqlwire

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"testing"
)

// Known vectors (the same as go-sql-driver's tests, computed independently of go-mysql).
func TestNativeScramble(t *testing.T) {
	scramble := []byte{70, 114, 92, 94, 1, 38, 11, 116, 63, 114, 23, 101, 126, 103, 26, 95, 81, 17, 24, 21}
	want := []byte{53, 177, 140, 159, 251, 189, 127, 53, 109, 252, 172, 50, 211, 192, 240, 164, 26, 48, 207, 45}
	if got := NativeScramble(scramble, "secret"); !bytes.Equal(got, want) {
		t.Fatalf("got %v", got)
	}
	if !checkScramble(NativePassword, scramble, "secret", want) || checkScramble(NativePassword, scramble, "Secret", want) {
		t.Fatal("checkScramble")
	}
	if NativeScramble(scramble, "") != nil {
		t.Fatal("empty password must give an empty reply")
	}
}

func TestCachingSha2Scramble(t *testing.T) {
	scramble := []byte{10, 47, 74, 111, 75, 73, 34, 48, 88, 76, 114, 74, 37, 13, 3, 80, 82, 2, 23, 21}
	for pass, want := range map[string]string{
		"secret":  "f490e76f66d9d86665ce54d98c78d0acfe2fb0b08b423da807144873d30b312c",
		"secret2": "abc3934a012cf342e876071c8ee202de51785b430258a7a0138bc79c4d800bc6",
	} {
		if got := hex.EncodeToString(CachingSha2Scramble(scramble, pass)); got != want {
			t.Fatalf("%s: got %s", pass, got)
		}
	}
}

func TestRSAPasswordRoundTrip(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	scramble, err := NewScramble()
	if err != nil {
		t.Fatal(err)
	}
	pemKey, err := PublicKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKeyPEM(pemKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, pass := range []string{"x", "a much longer password than the twenty byte scramble"} {
		c, err := EncryptPassword(pass, scramble, pub)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecryptPassword(c, scramble, key)
		if err != nil || got != pass {
			t.Fatalf("got %q %v", got, err)
		}
	}
}

func TestNewScramble(t *testing.T) {
	s, err := NewScramble()
	if err != nil || len(s) != ScrambleLen {
		t.Fatal(len(s), err)
	}
	for _, b := range s {
		if b == 0 || b == '$' || b > 126 {
			t.Fatalf("bad byte %d", b)
		}
	}
}

package peers

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func TestLookPathNamesPackage(t *testing.T) {
	_, err := LookPath("memcaslap-does-not-exist")
	if err == nil {
		t.Fatal("LookPath of a missing command succeeded")
	}
	old := debianPackages["no-such-cmd"]
	debianPackages["no-such-cmd"] = "no-such-pkg"
	defer func() {
		if old == "" {
			delete(debianPackages, "no-such-cmd")
		} else {
			debianPackages["no-such-cmd"] = old
		}
	}()
	_, err = LookPath("no-such-cmd")
	if err == nil || !strings.Contains(err.Error(), "no-such-pkg") {
		t.Fatalf("LookPath error %v does not name the Debian package", err)
	}
}

// TestHAProxyRelaysToBackend: the relay peer passes bytes both ways, here to a memcached behind it.
func TestHAProxyRelaysToBackend(t *testing.T) {
	ctx := context.Background()
	mc, err := StartMemcached(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Stop()
	h, err := StartHAProxy(ctx, mc.Addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.Stop(); err != nil {
			t.Error(err)
		}
	}()
	nc, err := net.Dial("tcp", h.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write([]byte("version\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "VERSION 1.") {
		t.Fatalf("through haproxy: %q, %v; want memcached's VERSION", line, err)
	}
}

package memcache

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestBinaryContainerErrors: a key naming no container is answered, for every binary command that takes a key, as
// memcached answers a request it refuses: status 0x0004 (Invalid arguments) with the reason in the body (the text
// protocol's CLIENT_ERROR message), and the connection stays open. php-memcached in binary mode then reports
// UNKNOWN READ FAILURE: libmemcached 1.1 discards an error's body and maps 0x0004, like every status it does not
// know, to that code (response.cc), for memcached's own 0x0004 too; the next request works.
func TestBinaryContainerErrors(t *testing.T) {
	d := newBinRunDoor(t)
	addr := serveTest(t, d.srv)
	c := dialBinary(t, addr)
	const key = "@@nosuch.k"
	for _, r := range []binReq{
		req(opGet, key, ""), req(opGetK, key, ""),
		req(opSet, key, "v", setExtras(0, 0)...), req(opAdd, key, "v", setExtras(0, 0)...), req(opReplace, key, "v", setExtras(0, 0)...),
		req(opAppend, key, "v"), req(opPrepend, key, "v"), req(opDelete, key, ""),
		req(opIncrement, key, "", arithExtras(1, 0, 0)...), req(opDecrement, key, "", arithExtras(1, 0, 0)...),
		req(opTouch, key, "", be32(10)...), req(opGAT, key, "", be32(10)...),
	} {
		got := c.do(r)
		if got.op != r.op || got.status != statusInvalid || !strings.HasPrefix(string(got.value), `no such container "nosuch"`) {
			t.Fatalf("opcode %#02x on %s: %#02x status %#04x %q; want status 0x0004 and the reason", r.op, key, got.op, got.status, got.value)
		}
	}
	expect(t, c.do(req(opGet, "r1", "")), opGet, statusOK, "value 1") // the connection still serves

	testenv.Need(t, "php")
	if out, err := exec.Command("php", "-r", `exit(class_exists("Memcached") ? 0 : 1);`).CombinedOutput(); err != nil {
		t.Fatalf("php-memcached (Debian package php-memcached) is not installed: %v %s", err, out)
	}
	host, port, _ := net.SplitHostPort(addr)
	const script = `
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->addServer($argv[1], (int)$argv[2]);
$ok = $m->set("@@nosuch.k", "v");
echo var_export($ok, true), " ", $m->getResultCode() == Memcached::RES_UNKNOWN_READ_FAILURE ? "UNKNOWN_READ_FAILURE" : $m->getResultMessage(), "\n";
echo var_export($m->set("@@default.r2", "two"), true), " ", $m->get("r2"), "\n";`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "php", "-r", script, "--", host, port).CombinedOutput()
	if want := "false UNKNOWN_READ_FAILURE\ntrue two\n"; err != nil || string(out) != want {
		t.Fatalf("php-memcached, binary: %q, %v; want %q", out, err, want)
	}
}

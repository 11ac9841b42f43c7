package memcache

import (
	"strings"
	"testing"
)

// TestBinaryContainerSwitch: the InnoDB plugin's "get @@name" over the binary protocol answers with the container's
// table ("schema/table") and switches the connection, so its keys without "@@" go to that container afterwards, also
// in a pipelined run of gets that has the switch in its middle; the other connections keep the default container.
func TestBinaryContainerSwitch(t *testing.T) {
	d := newBinRunDoor(t)
	addr := serveTest(t, d.srv)
	a, b := dialBinary(t, addr), dialBinary(t, addr)
	expect(t, a.do(req(opGet, "r1", "")), opGet, statusOK, "value 1")
	expect(t, a.do(req(opGet, "@@off", "")), opGet, statusOK, "test/binrun")
	// "off" refuses gets: the connection's plain keys now go there.
	if got := a.do(req(opGet, "r1", "")); got.status != statusInvalid || !strings.Contains(string(got.value), `container "off": get is disabled`) {
		t.Fatalf("get r1 after get @@off: status %#04x %q; want the container off's refusal", got.status, got.value)
	}
	expect(t, b.do(req(opGet, "r1", "")), opGet, statusOK, "value 1")
	// A run: r2 goes to "off", then "@@default" switches back, and r4 after it goes to the default container.
	a.send(req(opGetK, "r2", ""), req(opGetK, "@@default", ""), req(opGetK, "r4", ""))
	if got := a.recv(); got.status != statusInvalid {
		t.Fatalf("getk r2 in the run, switched to off: status %#04x %q; want the refusal", got.status, got.value)
	}
	if got := a.recv(); got.status != statusOK || string(got.key) != "@@default" || string(got.value) != "test/binrun" {
		t.Fatalf("getk @@default: status %#04x key %q value %q", got.status, got.key, got.value)
	}
	if got := a.recv(); got.status != statusOK || string(got.key) != "r4" || string(got.value) != "value 4" {
		t.Fatalf("getk r4 after get @@default: status %#04x key %q value %q", got.status, got.key, got.value)
	}
}

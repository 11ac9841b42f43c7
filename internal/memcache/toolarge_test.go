package memcache

import (
	"strings"
	"testing"
)

// TestTooLargeAcrossCodecs: a value over the item size limit is refused by
// each codec in its own words, and, as memcached does, a refused set (and
// every ms) drops the key's old value while other modes leave it; the
// value's bytes are skipped and the connection stays in step.
func TestTooLargeAcrossCodecs(t *testing.T) {
	big := strings.Repeat("v", 1<<20+1)
	text := []struct {
		name, write, reply, read, want string
	}{
		{"set", "set k 0 0 1048577\r\n", replyTooLarge, "get k\r\n", "END\r\n"},
		{"set noreply", "set k 0 0 1048577 noreply\r\n", "", "get k\r\n", "END\r\n"},
		{"append", "append k 0 0 1048577\r\n", replyTooLarge, "get k\r\n", "VALUE k 0 3\r\nold\r\nEND\r\n"},
		{"add", "add k 0 0 1048577\r\n", replyTooLarge, "get k\r\n", "VALUE k 0 3\r\nold\r\nEND\r\n"},
		{"cas", "cas k 0 0 1048577 1\r\n", replyTooLarge, "get k\r\n", "VALUE k 0 3\r\nold\r\nEND\r\n"},
		{"ms", "ms k 1048577 T0\r\n", replyTooLarge, "mg k v\r\n", "EN\r\n"},
		{"ms append", "ms k 1048577 MA\r\n", replyTooLarge, "mg k v\r\n", "EN\r\n"},
		{"ms quiet", "ms k 1048577 q\r\n", replyTooLarge, "mg k v\r\n", "EN\r\n"},
	}
	for _, tc := range text {
		t.Run("text "+tc.name, func(t *testing.T) {
			c := dialTest(t, newTestServer(t))
			c.send("set k 0 0 3\r\nold\r\n")
			c.expect(replyStored)
			c.send(tc.write + big + "\r\n" + tc.read)
			c.expect(tc.reply + tc.want)
		})
	}
	binary := []struct {
		name  string
		write binReq
		found bool
	}{
		{"set", req(opSet, "k", big, setExtras(0, 0)...), false},
		{"setq", req(opSetQ, "k", big, setExtras(0, 0)...), false},
		{"add", req(opAdd, "k", big, setExtras(0, 0)...), true},
		{"replace", req(opReplace, "k", big, setExtras(0, 0)...), true},
		{"append", req(opAppend, "k", big), true},
		{"prependq", req(opPrependQ, "k", big), true},
	}
	for _, tc := range binary {
		t.Run("binary "+tc.name, func(t *testing.T) {
			c := dialBinary(t, newTestServer(t))
			expect(t, c.do(req(opSet, "k", "old", setExtras(0, 0)...)), opSet, statusOK, "")
			c.send(tc.write, req(opGet, "k", ""))
			expect(t, c.recv(), tc.write.op, statusTooLarge, "Too large.") // errors are sent for quiet opcodes too
			if r := c.recv(); tc.found {
				expect(t, r, opGet, statusOK, "old")
			} else {
				expect(t, r, opGet, statusKeyNotFound, "Not found")
			}
		})
	}
}

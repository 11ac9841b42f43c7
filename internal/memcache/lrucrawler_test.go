package memcache

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/store"
	"github.com/keywaydb/keyway/internal/testenv"
)

// metadump sends "lru_crawler metadump <classes>" on a fresh connection and
// returns the reply up to and including END.
func metadump(t *testing.T, addr, classes string) string {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(peerEnd))
	if _, err := nc.Write([]byte("lru_crawler metadump " + classes + "\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	var out strings.Builder
	for !strings.HasSuffix(out.String(), "END\r\n") {
		line, err := br.ReadString('\n')
		out.WriteString(line)
		if err != nil {
			t.Fatalf("metadump %s: %v after %q", classes, err, out.String())
		}
	}
	return out.String()
}

// metadumpShape keeps what two servers agree on in a metadump: the lines,
// sorted (the order is each store's own), with each key, whether it
// expires, whether it was fetched, and its slab class (keyway counts items
// in memcached's); the times, CAS ids and sizes are each server's own.
func metadumpShape(dump string) []string {
	own := regexp.MustCompile(` (la|cas|size)=[0-9]+`)
	exp := regexp.MustCompile(` exp=[0-9]+`)
	lines := strings.SplitAfter(dump, "\n")
	for i, l := range lines {
		lines[i] = exp.ReplaceAllString(own.ReplaceAllString(l, ""), " exp=N")
	}
	slices.Sort(lines)
	return lines
}

// metadumpKeys are keys metadump must URI-encode, or not, as memcached does.
var metadumpKeys = []string{"plain", "k%20x", "a:b/c?d=e&f", "t~._-Z9", "\xc3\xa9t\xc3\xa9", "q\"'<>#"}

// TestMetadumpMatchesMemcached stores the same items in memcached 1.6 and
// keyway and compares their metadumps' shape (see metadumpShape); the
// refusals are compared byte for byte in TestEdgesMatchMemcached.
func TestMetadumpMatchesMemcached(t *testing.T) {
	mc := testenv.NewMemcached(t)
	kw := newTestServer(t)
	var setup strings.Builder
	for i, k := range metadumpKeys {
		setup.WriteString("set " + k + " " + strconv.Itoa(i) + " 0 1\r\nx\r\n")
	}
	setup.WriteString("set expiring 0 1000 1\r\nx\r\nget plain k%20x\r\nmg expiring v\r\nmn\r\n")
	for _, addr := range []string{mc.Addr, kw} {
		exchange(t, addr, setup.String())
	}
	for _, classes := range []string{"all", "hash", "1", "1,", "1,2"} {
		want, got := metadumpShape(metadump(t, mc.Addr, classes)), metadumpShape(metadump(t, kw, classes))
		// memcached's crawler can miss an item its LRU maintainer moves
		// while it walks (here and there the one just fetched): it is
		// asked again, a few times, for a whole listing.
		for try := 0; try < 5 && !slices.Equal(got, want); try++ {
			want = metadumpShape(metadump(t, mc.Addr, classes))
		}
		if !slices.Equal(got, want) {
			t.Errorf("metadump %s:\nkeyway    %q\nmemcached %q", classes, got, want)
		}
	}
	// A class with no items (all are in keyway's one class, and small
	// enough for memcached's first).
	if got, want := metadump(t, kw, "2"), metadump(t, mc.Addr, "2"); got != want {
		t.Errorf("metadump 2: keyway %q, memcached %q", got, want)
	}
}

// TestMetadumpValues checks each field of keyway's metadump lines against
// the item as stored.
func TestMetadumpValues(t *testing.T) {
	addr := newTestServer(t)
	c := dialTest(t, addr)
	c.send("set a%b 0 0 3\r\nabc\r\nset e 0 1000 1\r\nx\r\nmg e v\r\nmg a%b c\r\nmg e c t\r\n")
	c.expect("STORED\r\nSTORED\r\nVA 1\r\nx\r\n")
	line, _ := c.br.ReadString('\n')
	casA := strings.TrimSpace(strings.TrimPrefix(line, "HD c"))
	line, _ = c.br.ReadString('\n')
	var casE, ttl int64
	if _, err := fmt.Sscanf(line, "HD c%d t%d", &casE, &ttl); err != nil {
		t.Fatalf("mg e: %q: %v", line, err)
	}
	now := time.Now().Unix()
	dump := metadump(t, addr, "all")
	lines := strings.Split(strings.TrimSuffix(dump, "END\r\n"), "\n")
	slices.Sort(lines)
	if len(lines) != 3 || lines[0] != "" {
		t.Fatalf("metadump: %q", dump)
	}
	re := regexp.MustCompile(`^key=(\S+) exp=(-?[0-9]+) la=([0-9]+) cas=([0-9]+) fetch=(yes|no) cls=1 size=([0-9]+)$`)
	a, e := re.FindStringSubmatch(lines[1]), re.FindStringSubmatch(lines[2])
	if a == nil || e == nil {
		t.Fatalf("metadump lines: %q", lines[1:])
	}
	if a[1] != "a%25b" || a[2] != "-1" || a[4] != casA || a[5] != "yes" || a[6] != strconv.FormatInt(store.Size(3, 3), 10) {
		t.Errorf("a%%b: %q (cas %s)", lines[1], casA)
	}
	exp, _ := strconv.ParseInt(e[2], 10, 64)
	la, _ := strconv.ParseInt(e[3], 10, 64)
	if e[1] != "e" || exp < now+ttl-2 || exp > now+ttl+2 || la < now-5 || la > now || e[4] != strconv.FormatInt(casE, 10) ||
		e[5] != "yes" || e[6] != strconv.FormatInt(store.Size(1, 1), 10) {
		t.Errorf("e: %q (cas %d, ttl %d, now %d)", lines[2], casE, ttl, now)
	}
}

// TestCacheMemlimit checks cache_memlimit changes the memory limit:
// limit_maxbytes follows, and a lower limit evicts at once.
func TestCacheMemlimit(t *testing.T) {
	c := dialTest(t, newTestServer(t))
	value := strings.Repeat("v", 100<<10)
	for i := 0; i < 200; i++ { // 20 MB
		c.send("set k" + strconv.Itoa(i) + " 0 0 " + strconv.Itoa(len(value)) + " noreply\r\n" + value + "\r\n")
	}
	_, vals, _ := readStats(t, c)
	if statInt(t, vals, "curr_items") != 200 || statInt(t, vals, "evictions") != 0 {
		t.Fatalf("before: curr_items %s, evictions %s", vals["curr_items"], vals["evictions"])
	}
	c.send("cache_memlimit 8\r\n")
	c.expect("OK\r\n")
	_, vals, _ = readStats(t, c)
	if statInt(t, vals, "limit_maxbytes") != 8<<20 || statInt(t, vals, "bytes") > 8<<20 || statInt(t, vals, "evictions") == 0 {
		t.Errorf("after cache_memlimit 8: limit_maxbytes %s, bytes %s, evictions %s", vals["limit_maxbytes"], vals["bytes"], vals["evictions"])
	}
	c.send("cache_memlimit 128 noreply\r\nstats settings\r\n")
	c.expect("STAT maxbytes 134217728\r\n")
}

// TestPHPGetAllKeys lists keyway's keys with php-memcached's getAllKeys,
// which libmemcached answers with stats cachedump of every class.
func TestPHPGetAllKeys(t *testing.T) {
	testenv.Need(t, "php")
	if out, err := exec.Command("php", "-r", `exit(class_exists("Memcached") ? 0 : 1);`).CombinedOutput(); err != nil {
		t.Fatalf("php-memcached (Debian package php-memcached) is not installed: %v %s", err, out)
	}
	host, port, _ := net.SplitHostPort(newTestServer(t))
	const script = `
$m = new Memcached();
$m->addServer($argv[1], (int)$argv[2]);
foreach (["a", "b:c", "x%y", "gone"] as $k) { if (!$m->set($k, "v")) { echo "set failed: ", $m->getResultMessage(); exit(1); } }
$m->delete("gone");
$m->set("later", "v", 1000);
$k = $m->getAllKeys();
if ($k === false) { echo "getAllKeys failed: ", $m->getResultMessage(); exit(1); }
sort($k);
echo implode(",", $k);`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "php", "-r", script, "--", host, port).CombinedOutput()
	if want := "a,b:c,later,x%y"; err != nil || string(out) != want {
		t.Fatalf("php getAllKeys: %q, %v; want %q", out, err, want)
	}
}

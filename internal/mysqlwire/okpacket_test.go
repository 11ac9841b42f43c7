package mysqlwire

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// lenStr appends a length-encoded string.
func lenStr(b []byte, s string) []byte { return append(AppendLenEnc(b, uint64(len(s))), s...) }

// entry appends a session-state entry: its type and its data, length-encoded.
func entry(b []byte, typ byte, data []byte) []byte { return lenStr(append(b, typ), string(data)) }

// okHead appends an OK packet's header, counts, status and warnings.
func okHead(header byte, affected, lastID uint64, status, warnings uint16) []byte {
	b := AppendLenEnc(AppendLenEnc([]byte{header}, affected), lastID)
	return append(b, byte(status), byte(status>>8), byte(warnings), byte(warnings>>8))
}

// changes lists a packet's session changes as "type:name=value" strings.
func changes(t *testing.T, ok *OK) []string {
	t.Helper()
	var got []string
	if err := ok.SessionChanges(func(c SessionChange) bool {
		got = append(got, fmt.Sprintf("%d:%s=%s", c.Type, c.Name, c.Value))
		return true
	}); err != nil {
		t.Fatalf("SessionChanges: %v", err)
	}
	return got
}

func TestParseOKSessionState(t *testing.T) {
	var block []byte
	block = entry(block, SessionTrackSystemVariables, lenStr(lenStr(nil, "character_set_client"), "latin1"))
	block = entry(block, SessionTrackSystemVariables, lenStr(lenStr(nil, "time_zone"), "+01:00"))
	block = entry(block, SessionTrackSchema, lenStr(nil, "test"))
	block = entry(block, SessionTrackStateChange, lenStr(nil, "1"))
	block = entry(block, SessionTrackGTIDs, lenStr([]byte{0}, "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"))
	block = entry(block, 0x42, []byte("a future entry"))
	block = entry(block, SessionTrackTransactionCharacteristics, lenStr(nil, "SET TRANSACTION READ ONLY;"))
	block = entry(block, SessionTrackTransactionState, lenStr(nil, "T_______"))
	long := strings.Repeat("x", 300) // a two-byte length prefix
	block = entry(block, SessionTrackSystemVariables, lenStr(lenStr(nil, "sql_mode"), long))

	status := StatusAutocommit | StatusSessionStateChanged
	p := lenStr(okHead(HeaderOK, 3, 300, status, 2), "Rows matched: 3")
	p = lenStr(p, string(block))

	ok, err := ParseOK(p, ClientSessionTrack|ClientProtocol41)
	if err != nil {
		t.Fatal(err)
	}
	if ok.AffectedRows != 3 || ok.LastInsertID != 300 || ok.Status != status || ok.Warnings != 2 ||
		string(ok.Info) != "Rows matched: 3" || ok.Header != HeaderOK {
		t.Fatalf("ParseOK = %+v", ok)
	}
	want := []string{
		"0:character_set_client=latin1", "0:time_zone=+01:00", "1:=test", "2:=1",
		"3:=3E11FA47-71CA-11E1-9E33-C80AA9429562:23", "4:=SET TRANSACTION READ ONLY;", "5:=T_______",
		"0:sql_mode=" + long,
	}
	if got := changes(t, &ok); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("changes\n got %q\nwant %q", got, want)
	}

	// Stopping early.
	n := 0
	if err := ok.SessionChanges(func(SessionChange) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Fatalf("stop after 2: n=%d err=%v", n, err)
	}

	// No allocation for the parse and the walk.
	allocs := testing.AllocsPerRun(100, func() {
		ok, _ := ParseOK(p, ClientSessionTrack)
		_ = ok.SessionChanges(func(c SessionChange) bool { return len(c.Value) >= 0 })
	})
	if allocs != 0 {
		t.Fatalf("ParseOK + SessionChanges allocate %v times", allocs)
	}

	// Rewritten for a client without session tracking: the block and the flag go, the info stays.
	stripped, err := StripSessionState(bytes.Clone(p))
	if err != nil {
		t.Fatal(err)
	}
	if w := lenStr(okHead(HeaderOK, 3, 300, StatusAutocommit, 2), "Rows matched: 3"); !bytes.Equal(stripped, w) {
		t.Fatalf("stripped\n got % x\nwant % x", stripped, w)
	}
}

func TestParseOKShapes(t *testing.T) {
	st := StatusAutocommit
	for _, tc := range []struct {
		name     string
		p        []byte
		caps     uint32
		info     string
		stripped []byte // nil: the same as p
	}{
		{"bare", okHead(HeaderOK, 0, 0, st, 0), ClientSessionTrack, "", nil},
		{"bare without tracking", okHead(HeaderOK, 0, 0, st, 0), 0, "", nil},
		{"EOF as OK", okHead(HeaderEOF, 0, 0, st, 0), ClientSessionTrack | ClientDeprecateEOF, "", nil},
		{"large counts", okHead(HeaderOK, 1<<40, 70000, st, 0), ClientSessionTrack, "", nil},
		{"info", lenStr(okHead(HeaderOK, 2, 0, st, 0), "Records: 2  Duplicates: 0  Warnings: 0"), ClientSessionTrack,
			"Records: 2  Duplicates: 0  Warnings: 0", nil},
		{"length-encoded info without tracking", lenStr(okHead(HeaderOK, 2, 0, st, 0), "Records: 2"), 0,
			"Records: 2", nil},
		{"string<EOF> info without tracking", append(okHead(HeaderOK, 2, 0, st, 0), "Records: 2"...), 0,
			"Records: 2", nil},
		{"state flag, empty info, empty block",
			append(okHead(HeaderOK, 0, 0, st|StatusSessionStateChanged, 0), 0, 0), ClientSessionTrack, "",
			okHead(HeaderOK, 0, 0, st, 0)},
		{"state flag, empty info, no block",
			append(okHead(HeaderOK, 0, 0, st|StatusSessionStateChanged, 0), 0), ClientSessionTrack, "",
			okHead(HeaderOK, 0, 0, st, 0)},
		{"EOF as OK with state", lenStr(append(okHead(HeaderEOF, 0, 0, st|StatusSessionStateChanged, 1), 0),
			string(entry(nil, SessionTrackSchema, lenStr(nil, "db")))), ClientSessionTrack, "",
			okHead(HeaderEOF, 0, 0, st, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := ParseOK(tc.p, tc.caps)
			if err != nil {
				t.Fatal(err)
			}
			if string(ok.Info) != tc.info || ok.Status&^StatusSessionStateChanged != st {
				t.Fatalf("ParseOK = %+v", ok)
			}
			if tc.caps&ClientSessionTrack == 0 {
				return
			}
			want := tc.stripped
			if want == nil {
				want = tc.p
			}
			got, err := StripSessionState(bytes.Clone(tc.p))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("StripSessionState = % x, %v; want % x", got, err, want)
			}
		})
	}
}

func TestParseOKMalformed(t *testing.T) {
	st := StatusSessionStateChanged
	good := lenStr(append(okHead(HeaderOK, 1, 2, st, 0), 0),
		string(entry(nil, SessionTrackSystemVariables, lenStr(lenStr(nil, "autocommit"), "ON"))))
	if _, err := ParseOK(good, ClientSessionTrack); err != nil {
		t.Fatal(err)
	}
	// Every truncation of a packet with session state is an error (or a shorter well-formed packet), never a panic.
	for n := range len(good) {
		ok, err := ParseOK(good[:n], ClientSessionTrack)
		if err == nil {
			err = ok.SessionChanges(func(SessionChange) bool { return true })
		}
		if n > 0 && err == nil && n != 7 && n != 8 {
			t.Errorf("truncated to %d bytes: no error", n)
		}
		if err != nil && !errors.Is(err, ErrMalformedOK) {
			t.Errorf("truncated to %d bytes: %v does not wrap ErrMalformedOK", n, err)
		}
	}
	for _, tc := range []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"ERR header", []byte{HeaderERR, 1, 2}},
		{"NULL as affected rows", []byte{0, 0xfb, 0, 0, 0, 0, 0}},
		{"no warnings", []byte{0, 0, 0, 2, 0, 0}},
		{"info overruns", append(okHead(HeaderOK, 0, 0, 0, 0), 5, 'a')},
		{"bytes after info", append(okHead(HeaderOK, 0, 0, 0, 0), 1, 'a', 'b')},
		{"block overruns", append(okHead(HeaderOK, 0, 0, st, 0), 0, 9, 1)},
		{"bytes after block", append(okHead(HeaderOK, 0, 0, st, 0), 0, 1, 0x42, 0)},
		{"entry overruns block", append(okHead(HeaderOK, 0, 0, st, 0), 0, 3, 1, 5, 1)},
		{"variable without value", lenStr(append(okHead(HeaderOK, 0, 0, st, 0), 0),
			string(entry(nil, 0, lenStr(nil, "autocommit"))))},
		{"GTID with encoding 1", lenStr(append(okHead(HeaderOK, 0, 0, st, 0), 0),
			string(entry(nil, SessionTrackGTIDs, lenStr([]byte{1}, "x"))))},
		{"schema with trailing byte", lenStr(append(okHead(HeaderOK, 0, 0, st, 0), 0),
			string(entry(nil, SessionTrackSchema, append(lenStr(nil, "db"), 0))))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := ParseOK(tc.p, ClientSessionTrack)
			if err == nil {
				err = ok.SessionChanges(func(SessionChange) bool { return true })
			}
			if !errors.Is(err, ErrMalformedOK) {
				t.Fatalf("err = %v, want ErrMalformedOK", err)
			}
			if err == nil || tc.p == nil {
				return
			}
			if _, serr := ParseOK(tc.p, ClientSessionTrack); serr != nil {
				orig := bytes.Clone(tc.p)
				if got, err := StripSessionState(tc.p); err == nil || !bytes.Equal(got, orig) {
					t.Fatalf("StripSessionState changed a malformed packet: % x, %v", got, err)
				}
			}
		})
	}
}

// FuzzOKPacket: ParseOK, SessionChanges and StripSessionState never panic on any bytes, and a stripped packet
// parses, without CLIENT_SESSION_TRACK, to the same counts, status (less the flag), warnings and info.
func FuzzOKPacket(f *testing.F) {
	f.Add(okHead(HeaderOK, 0, 0, StatusAutocommit, 0), true)
	f.Add(lenStr(okHead(HeaderOK, 3, 9, StatusAutocommit, 1), "Rows matched: 3"), false)
	var block []byte
	block = entry(block, SessionTrackSystemVariables, lenStr(lenStr(nil, "last_gtid"), "0-1-5"))
	block = entry(block, SessionTrackSchema, lenStr(nil, "test"))
	block = entry(block, SessionTrackGTIDs, lenStr([]byte{0}, "uuid:1-5"))
	block = entry(block, SessionTrackTransactionState, lenStr(nil, "T_______"))
	block = entry(block, 0x42, []byte("?"))
	f.Add(lenStr(append(okHead(HeaderEOF, 1, 2, StatusSessionStateChanged, 0), 0), string(block)), true)
	f.Fuzz(func(t *testing.T, p []byte, track bool) {
		caps := uint32(0)
		if track {
			caps = ClientSessionTrack
		}
		ok, err := ParseOK(p, caps)
		if err != nil {
			if !errors.Is(err, ErrMalformedOK) {
				t.Fatalf("error %v does not wrap ErrMalformedOK", err)
			}
			return
		}
		if err := ok.SessionChanges(func(c SessionChange) bool { return true }); err != nil &&
			!errors.Is(err, ErrMalformedOK) {
			t.Fatalf("SessionChanges error %v does not wrap ErrMalformedOK", err)
		}
		if !track {
			return
		}
		info := string(ok.Info)
		got, err := StripSessionState(bytes.Clone(p))
		if err != nil {
			t.Fatalf("StripSessionState fails on a packet ParseOK took: %v", err)
		}
		back, err := ParseOK(got, 0)
		if err != nil {
			t.Fatalf("stripped packet % x does not parse: %v", got, err)
		}
		if back.AffectedRows != ok.AffectedRows || back.LastInsertID != ok.LastInsertID ||
			back.Status != ok.Status&^StatusSessionStateChanged || back.Warnings != ok.Warnings ||
			string(back.Info) != info || len(back.SessionState) != 0 {
			t.Fatalf("stripped %+v from %+v", back, ok)
		}
	})
}

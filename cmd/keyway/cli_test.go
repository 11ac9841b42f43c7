package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpGoesToStdoutAndErrorsOnce: every command's -h prints its usage on stdout and exits 0; a bad flag is one
// line on stderr, naming the command once, and exit status 2.
func TestHelpGoesToStdoutAndErrorsOnce(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"check"}, {"stats"}, {"bench", "memcache"}, {"bench", "sql"},
		{"bench", "kv"}, {"bench", "staleness"}, {"bench", "report"}, {"bench", "compare"}} {
		name := "keyway " + strings.Join(cmd, " ")
		for _, help := range []string{"-h", "--help"} {
			var out, errb bytes.Buffer
			if code := run(append(append([]string{}, cmd...), help), &out, &errb); code != 0 || out.Len() == 0 || errb.Len() != 0 {
				t.Errorf("%s %s: exit %d, %d bytes on stdout, stderr %q; want 0, the usage on stdout, nothing on stderr",
					name, help, code, out.Len(), errb.String())
			}
		}
		var out, errb bytes.Buffer
		code := run(append(append([]string{}, cmd...), "--bogus"), &out, &errb)
		if code != 2 || strings.Count(errb.String(), name+":") != 1 || !strings.Contains(errb.String(), "-bogus") {
			t.Errorf("%s --bogus: exit %d, stderr %q; want 2 and one line naming the command once", name, code, errb.String())
		}
	}
	var out bytes.Buffer
	run([]string{"--help"}, &out, &out)
	for _, want := range []string{"bench kv", "bench staleness", "bench report", "bench compare", "check", "stats"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("keyway --help lacks %q", want)
		}
	}
}

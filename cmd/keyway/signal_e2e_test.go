package main

// Signals that must not stop keyway.

import (
	"strings"
	"syscall"
	"testing"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestSIGHUPKeepsServing: SIGHUP does not stop keyway (its default action would,
// silently); keyway reloads, logs it and keeps serving what it held.
func TestSIGHUPKeepsServing(t *testing.T) {
	kw := testenv.NewKeyway(t)
	mc := memcache.New(kw.Addr)
	if err := mc.Set(&memcache.Item{Key: "k", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if err := kw.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the SIGHUP log line", func() (bool, string) {
		if kw.Exited() {
			t.Fatalf("keyway exited on SIGHUP:\n%s", kw.Output())
		}
		return strings.Contains(kw.Output(), "SIGHUP"), "no line"
	})
	if it, err := mc.Get("k"); err != nil || string(it.Value) != "v" {
		t.Fatalf("get after SIGHUP: %v %v\n%s", it, err, kw.Output())
	}
	if kw.Exited() {
		t.Fatalf("keyway exited after SIGHUP:\n%s", kw.Output())
	}
}

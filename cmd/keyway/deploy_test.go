package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestSystemdUnit: deploy/keyway.service passes systemd-analyze verify (every directive known and well formed),
// with ExecStart pointed at the keyway under test; it says nothing at all.
func TestSystemdUnit(t *testing.T) {
	testenv.Need(t, "systemd-analyze")
	bin, err := testenv.KeywayBinary()
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile("../../deploy/keyway.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/keyway serve --config /etc/keyway/keyway.toml\n") {
		t.Fatalf("the unit's ExecStart is not the one the README installs")
	}
	path := filepath.Join(t.TempDir(), "keyway.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/keyway", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

package peers

import (
	"strings"
	"testing"
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

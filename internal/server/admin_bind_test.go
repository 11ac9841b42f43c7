package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/keywaydb/keyway/internal/config"
)

// TestAdminListenWithoutHostBindsLoopback: "[admin] listen = ':port'" binds 127.0.0.1, not every interface; other
// hosts are reached only by naming an address.
func TestAdminListenWithoutHostBindsLoopback(t *testing.T) {
	cfg := config.Default()
	cfg.Memcache.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = ":0"
	cfg.EnsureDefaults()
	s, err := Start(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Stop(ctx)
	}()
	addr, ok := s.adminLn.Addr().(*net.TCPAddr)
	if !ok || !addr.IP.IsLoopback() {
		t.Fatalf("admin listener on %v, want loopback", s.adminLn.Addr())
	}
	for listen, want := range map[string]string{":9104": "127.0.0.1:9104", "0.0.0.0:9104": "0.0.0.0:9104", "[::1]:1": "[::1]:1"} {
		if got := adminBind(listen); got != want {
			t.Errorf("adminBind(%q) = %q, want %q", listen, got, want)
		}
	}
}

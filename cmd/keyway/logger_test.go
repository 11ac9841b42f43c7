package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/keywaydb/keyway/internal/testenv"
)

// TestLogErrorsWithoutStacks: an error attribute is logged as its message, on one line, also one of go-mysql's
// (github.com/pingcap/errors, whose %+v appends a Go stack trace), wrapped or in a group.
func TestLogErrorsWithoutStacks(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, mysqlErr := client.ConnectWithContext(ctx, fmt.Sprintf("127.0.0.1:%d", port), "u", "p", "", time.Second)
	if mysqlErr == nil {
		t.Fatal("connected to a port nothing listens on")
	}
	if full := fmt.Sprintf("%+v", mysqlErr); !strings.Contains(full, "\n") {
		t.Fatalf("go-mysql's error no longer carries a stack trace (%q): this test tests nothing", full)
	}
	var nilErr *testError
	var buf bytes.Buffer
	log := newLogger(&buf, slog.LevelInfo)
	log.Warn("one", "err", mysqlErr)
	log.Warn("two", "err", fmt.Errorf("wrapped: %w", mysqlErr))
	log.Warn("three", slog.Group("g", "err", mysqlErr), "n", 1, "nil", nilErr)
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 || strings.Contains(buf.String(), `\n`) || strings.Contains(buf.String(), ".go:") {
		t.Fatalf("want three lines without a stack trace:\n%s", buf.String())
	}
	for i, want := range []string{
		`err="` + mysqlErr.Error() + `"`,
		`err="wrapped: ` + mysqlErr.Error() + `"`,
		`g.err="` + mysqlErr.Error() + `" n=1 nil="<nil *main.testError>"`,
	} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %d is\n%s\nwant it to end in\n%s", i, lines[i], want)
		}
	}
}

type testError struct{ msg string }

func (e *testError) Error() string { return e.msg }

package main

// keyway check: validate a configuration and its backends without serving.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/keywaydb/keyway/internal/config"
	"github.com/keywaydb/keyway/internal/server"
)

// checkTimeout bounds the whole check: every group's connect_timeout applies within it.
const checkTimeout = 2 * time.Minute

// runCheck takes serve's flags (so it checks exactly what `keyway serve` with the same flags would run), validates
// the configuration, then connects to every backend group (server.Check). It prints one line per problem on stdout
// and exits 1 when there is any, or "ok" and 0; warnings ("warning: …", a replica to fix) follow the problems and
// do not change the exit code.
func runCheck(args []string, stdout, stderr io.Writer) int {
	cfg, err := config.ParseArgs("check", "Validates the configuration serve would run, then connects to every backend group and prints one line per problem (exit 1), or ok (exit 0). It opens no port.", args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var usage *config.UsageError
	if errors.As(err, &usage) {
		fmt.Fprintf(stderr, "keyway check: %v\n", err)
		return 2
	}
	if err != nil {
		// Validate joins its problems with newlines: one problem a line already.
		fmt.Fprintln(stdout, err)
		return 1
	}
	useDriverLogger(newLogger(stderr, slog.LevelInfo))
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	problems, warnings := server.Check(ctx, cfg)
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	for _, w := range warnings {
		fmt.Fprintln(stdout, "warning: "+w)
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "keyway check: %d problem(s)\n", len(problems))
		return 1
	}
	fmt.Fprintf(stdout, "ok: the configuration is valid and its %d backend group(s) and %d container(s) are usable\n",
		len(cfg.Groups), len(cfg.Containers))
	return 0
}

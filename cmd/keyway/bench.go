package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/keywaydb/keyway/internal/bench"
)

const benchUsage = `usage: keyway bench memcache [flags]

Runs keyway (memory-only, async, sync) and memcached 1.6 side by side under
memcaslap and prints ops/s min/median/max and the ratios to memcached.
`

func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "memcache" {
		fmt.Fprint(stderr, benchUsage)
		return 2
	}
	fs := flag.NewFlagSet("keyway bench memcache", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.MemcacheOptions{}
	fs.DurationVar(&o.Duration, "duration", 0, "length of each run, whole seconds (default 10s)")
	fs.IntVar(&o.Repetitions, "reps", 0, "runs per target, alternating between targets (default 3)")
	fs.IntVar(&o.Concurrency, "c", 0, "memcaslap concurrency (default 8)")
	fs.IntVar(&o.ValueSize, "value-size", 0, "value bytes (default 400)")
	fs.IntVar(&o.MemoryMB, "m", 0, "memory limit of both servers in MB (default 1024)")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "keyway bench: cannot find own binary: %v\n", err)
		return 1
	}
	o.KeywayBinary = self
	if !*jsonOut {
		o.Out = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunMemcache(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "keyway bench memcache: %v\n", err)
		return 1
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return 1
		}
		return 0
	}
	rep.WriteText(stdout)
	return 0
}

package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// runPromote is keyway failover and keyway switchover: the running keyway at --admin promotes a replica of
// --group (see docs/replicas.md), and the command prints its report.
func runPromote(op string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keyway "+op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", statsDefaultAdmin, "the admin listener's `address` of the keyway that serves the group")
	group := fs.String("group", "", "the `group` whose primary changes (required)")
	token := fs.String("token", os.Getenv("KEYWAY_ADMIN_TOKEN"), "the admin `token`, when [admin] token is set (default $KEYWAY_ADMIN_TOKEN)")
	var to *string
	var hold *time.Duration
	if op == "switchover" {
		to = fs.String("to", "", "the replica (`host:port`) to promote (default: the most advanced)")
		hold = fs.Duration("hold", 2*time.Second, "the longest new writes wait, and open transactions get to end")
	}
	if status, done := parseFlags(fs, args, stdout, stderr); done {
		return status
	}
	if fs.NArg() > 0 || *group == "" {
		fmt.Fprintf(stderr, "keyway %s: --group is required, and it takes flags only\n", op)
		return 2
	}
	q := url.Values{}
	if to != nil && *to != "" {
		q.Set("to", *to)
	}
	if hold != nil {
		q.Set("hold", hold.String())
	}
	u := "http://" + *admin + "/groups/" + url.PathEscape(*group) + "/" + op + "?" + q.Encode()
	req, err := http.NewRequest(http.MethodPost, u, nil)
	if err != nil {
		fmt.Fprintf(stderr, "keyway %s: %v\n", op, err)
		return 2
	}
	if *token != "" {
		req.Header.Set("Authorization", "Bearer "+*token)
	}
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "keyway %s: %v (is keyway running with [admin] listen at this address?)\n", op, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "keyway %s: %s: %s\n", op, resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	_, _ = stdout.Write(body)
	return 0
}

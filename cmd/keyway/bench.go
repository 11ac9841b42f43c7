package main

import (
	"fmt"
	"io"
)

func bench(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "keyway bench: not built yet")
	return 2
}

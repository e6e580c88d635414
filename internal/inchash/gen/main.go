// Command gen writes include_hash.go (package -pkg) in the current folder
// from the headers in -dir: `go generate ./csrc` runs it (see
// internal/inchash).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/deepgo-ml/deepgo/internal/inchash"
)

func main() {
	dir := flag.String("dir", "include", "the headers' folder")
	pkg := flag.String("pkg", "", "the Go package name of the file written")
	flag.Parse()
	if *pkg == "" {
		fmt.Fprintln(os.Stderr, "gen: -pkg is required")
		os.Exit(2)
	}
	sum, err := inchash.Sum(*dir)
	if err == nil {
		err = os.WriteFile("include_hash.go", inchash.Source(*pkg, sum), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

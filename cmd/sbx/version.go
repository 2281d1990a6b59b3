package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is sbx's release version, set at build time with
// -ldflags "-X main.version=v1.2.3". When it is left at "dev", sbx version
// reports what the Go toolchain recorded in the binary instead.
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version of sbx, of Go, and the platform",
		Example: "  sbx version",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printVersion(cmd.OutOrStdout())
		},
	}
}

// printVersion writes sbx's version, Go's, and the platform, what sbx
// version and sbx --version print.
func printVersion(w io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	_, err := fmt.Fprintf(w, "sbx %s\n%s %s/%s\n", resolveVersion(version, bi), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

// resolveVersion returns v, or when v is "dev" the main module's version
// from bi, or "dev-<revision>" (with "-dirty" for modified sources) when
// only the VCS revision is known. bi may be nil.
func resolveVersion(v string, bi *debug.BuildInfo) string {
	if v != "dev" || bi == nil {
		return v
	}
	if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
		return mv
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return v + "-" + rev
}

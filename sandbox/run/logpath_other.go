//go:build !linux

package run

// mountAliases returns real alone: outside Linux, sbx does not look for
// the other places a mount may show it.
func mountAliases(real string) ([]string, error) {
	return []string{real}, nil
}

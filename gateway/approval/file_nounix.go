//go:build !unix

package approval

import "io/fs"

// lockFile takes no lock: outside Unix, where sbx runs no sandbox, two
// processes writing one approvals file at once may lose a rule.
func lockFile(path, lockPath string) (unlock func(), err error) { return func() {}, nil }

// fileOwner does not know who owns a file outside Unix.
func fileOwner(fs.FileInfo) (uint32, bool) { return 0, false }

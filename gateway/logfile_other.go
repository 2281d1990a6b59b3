//go:build !linux

package gateway

import (
	"errors"
	"fmt"
	"os"
)

// openLogFile is not implemented outside Linux: the checks that keep a
// sandbox from redirecting or hanging the decision log need O_NOFOLLOW,
// O_NONBLOCK and fstat's owner and link count, as written for Linux.
func openLogFile(path string) (*os.File, int64, error) {
	return nil, 0, fmt.Errorf("decision log %s: %w", path, errors.ErrUnsupported)
}

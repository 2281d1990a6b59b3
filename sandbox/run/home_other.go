//go:build !linux

package run

import "errors"

// mountOverlay refuses: overlayfs, which --home overlay and --agent need,
// is Linux's.
func mountOverlay(parent, dir string, size int64) (string, func(), error) {
	return "", nil, errors.New("--home overlay and --agent need Linux's overlayfs")
}

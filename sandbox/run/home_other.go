//go:build !linux

package run

import "errors"

// mountOverlay refuses: overlayfs, which --home overlay and --agent need,
// is Linux's.
func mountOverlay(parent, dir string, size int64) (string, func(), error) {
	return "", nil, errors.New("an overlay of the home needs Linux's overlayfs")
}

// GCHomes finds nothing: overlays of the home are Linux's.
func GCHomes(parent string) ([]string, error) { return nil, nil }

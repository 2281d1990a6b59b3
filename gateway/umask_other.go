//go:build !unix

package gateway

// umask does nothing where there is no umask.
func umask(mask int) int { return 0 }

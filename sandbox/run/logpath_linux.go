package run

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountInfo is one line of /proc/PID/mountinfo: a mount's id, its
// filesystem's device, the path inside that filesystem of the directory
// (or file) mounted, and where it is mounted.
type mountInfo struct {
	id    int
	dev   string // major:minor
	root  string
	point string
}

// mountAliases returns every path under which this mount namespace shows
// what real (a path without symbolic links, as filepath.EvalSymlinks
// returns it) holds, real itself among them: a bind mount of real, or of
// a directory below it, elsewhere; the whole filesystem mounted again;
// and, since a sandbox's read-write mounts are recursive binds, the other
// places where a mount below real shows its filesystem. A path lies in
// real's tree, whatever mounts it goes through, exactly when it lies
// under one of them. It reads the calling thread's mounts, and fails
// rather than guess when they do not say where real is.
func mountAliases(real string) ([]string, error) {
	mounts, err := readMountInfo("/proc/thread-self/mountinfo")
	if err != nil {
		return nil, err
	}
	m, rel, err := mountOf(real, mounts)
	if err != nil {
		return nil, err
	}
	// The trees the sandbox can write, as (device, path in the
	// filesystem): real's, and those of the mounts below real.
	type region struct{ dev, path string }
	regions := []region{{m.dev, filepath.Join(m.root, rel)}}
	for _, sub := range mounts {
		if sub.point != real && within(sub.point, real) {
			regions = append(regions, region{sub.dev, sub.root})
		}
	}
	aliases := []string{real}
	for _, r := range regions {
		for _, o := range mounts {
			switch {
			case o.dev != r.dev:
			case within(r.path, o.root): // o shows the region, or more
				aliases = append(aliases, filepath.Join(o.point, strings.TrimPrefix(r.path, o.root)))
			case within(o.root, r.path): // o shows part of the region
				aliases = append(aliases, o.point)
			}
		}
	}
	return aliases, nil
}

// within reports whether the clean absolute path p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// mountOf finds the mount that holds real, as the kernel says (the mount
// id of a descriptor of it), and real's path inside that mount.
func mountOf(real string, mounts []mountInfo) (mountInfo, string, error) {
	fd, err := unix.Open(real, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return mountInfo{}, "", &os.PathError{Op: "open", Path: real, Err: err}
	}
	defer unix.Close(fd)
	info, err := os.ReadFile("/proc/thread-self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return mountInfo{}, "", err
	}
	id := -1
	for line := range bytes.Lines(info) {
		if v, ok := bytes.CutPrefix(line, []byte("mnt_id:")); ok {
			if id, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				return mountInfo{}, "", fmt.Errorf("the mount of %s: %q in fdinfo is not a number", real, v)
			}
		}
	}
	// The path as the kernel reaches it, not as given.
	at, err := os.Readlink("/proc/thread-self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return mountInfo{}, "", err
	}
	for _, m := range mounts {
		if m.id == id && within(at, m.point) {
			return m, strings.TrimPrefix(at, m.point), nil
		}
	}
	return mountInfo{}, "", fmt.Errorf("the mount of %s (id %d, reached as %s) is not in this thread's mountinfo", real, id, at)
}

// readMountInfo reads a mountinfo file (proc(5)).
func readMountInfo(path string) ([]mountInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var mounts []mountInfo
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("%s: line %q has fewer than 5 fields", path, sc.Text())
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("%s: line %q: mount id %q is not a number", path, sc.Text(), f[0])
		}
		// A root need not be a path: a bound namespace's is net:[N].
		root, err1 := unescapeMountPath(f[3])
		point, err2 := unescapeMountPath(f[4])
		if err1 != nil || err2 != nil || !strings.HasPrefix(point, "/") {
			return nil, fmt.Errorf("%s: line %q: a path is badly escaped, or the mount point is not absolute", path, sc.Text())
		}
		mounts = append(mounts, mountInfo{id: id, dev: f[2], root: root, point: point})
	}
	if len(mounts) == 0 {
		return nil, fmt.Errorf("%s: no mounts", path)
	}
	return mounts, sc.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space,
// \011, \012, \134) of a path.
func unescapeMountPath(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", fmt.Errorf("%q: a short escape", s)
		}
		n, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("%q: %w", s, err)
		}
		b.WriteByte(byte(n))
		i += 3
	}
	return b.String(), nil
}

package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// userNote is what sbx run says about the user u before the command
// starts, or "": a warning when it is host root or root's group, or holds
// a capability that reaches the host's files, and why it cannot write a
// working directory that belongs to root.
func userNote(u run.User, hostLayout bool, cwd string, capAdd []string) string {
	switch {
	case u.UID == 0:
		return "--user 0: the command runs as root on the host (without the capabilities sbx drops); what it writes in the working directory and -v mounts belongs to root, set-user-ID bits included"
	case u.GID == 0:
		return "--user with group 0: the command runs in root's group on the host; what it writes in the working directory and -v mounts belongs to that group, set-group-ID bits included"
	}
	if risky := slices.DeleteFunc(slices.Clone(capAdd), func(c string) bool { return c == "CAP_NET_RAW" }); len(risky) > 0 {
		return fmt.Sprintf("--cap-add %s: the command can use it on the host's files in the working directory and -v mounts (set file capabilities, make device nodes, change owners or become another user there); give it only to code you would run as root",
			strings.Join(risky, ", "))
	}
	if !hostLayout || u.Why != run.UserNobody {
		return ""
	}
	if fi, err := os.Stat(cwd); err == nil && fi.Mode().Perm()&0o002 == 0 {
		return fmt.Sprintf("the command runs as nobody (uid %d), never as host root: it cannot write the working directory %s, which belongs to root; run sbx with sudo from your own user, give the directory to a user (chown), or name one with --user UID", u.UID, cwd)
	}
	return ""
}

// parseCaps checks --cap-add values: each must be one of the capabilities
// sbx drops; "chown" and "CAP_CHOWN" both name CAP_CHOWN.
func parseCaps(names []string) ([]string, error) {
	var caps []string
	for _, n := range names {
		c := strings.ToUpper(n)
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		if !slices.Contains(sandbox.DroppedCapabilities, c) {
			return nil, fmt.Errorf("--cap-add %s: sbx gives back only %s (CAP_NET_ADMIN never: the sandbox must not change its own network)",
				n, strings.Join(sandbox.DroppedCapabilities, ", "))
		}
		if !slices.Contains(caps, c) {
			caps = append(caps, c)
		}
	}
	return caps, nil
}

// limits turns --memory, --cpus, --pids-limit and --tmp-size into values.
func (o runOptions) limits() (sandbox.Limits, int64, error) {
	l := sandbox.DefaultLimits()
	if o.memory != "" {
		n, err := parseBytes(o.memory)
		if err != nil {
			return l, 0, fmt.Errorf("--memory %q: %w", o.memory, err)
		}
		l.Memory = n
	}
	if o.cpus < 0 {
		return l, 0, fmt.Errorf("--cpus %v: want a number of CPUs such as 1 or 0.5, or 0 for no limit", o.cpus)
	}
	if o.pidsLimit < 0 {
		return l, 0, fmt.Errorf("--pids-limit %d: want a number of processes, or 0 for no limit", o.pidsLimit)
	}
	l.CPUs, l.Pids = o.cpus, o.pidsLimit
	tmp, err := parseBytes(o.tmpSize)
	if err != nil || tmp == 0 {
		return l, 0, fmt.Errorf("--tmp-size %q: want a size such as 1g or 256m", o.tmpSize)
	}
	return l, tmp, nil
}

// parseBytes parses a size: a number with an optional binary suffix b, k,
// m, g or t (any case, an optional trailing "ib" or "b"), such as 2g,
// 512m or 1.5GiB.
func parseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "ib"), "b")
	mult := 1.0
	if t != "" {
		if i := strings.IndexByte("kmgt", t[len(t)-1]); i >= 0 {
			mult = float64(int64(1) << (10 * (i + 1)))
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || n*mult > 1<<62 {
		return 0, errors.New("want a size in bytes such as 2g, 512m or 1073741824")
	}
	return int64(n * mult), nil
}

// formatBytes writes n in the largest binary unit of t, g and m that
// divides it, else in GiB with one decimal when it is that large (the
// help's rounded default), else in k or bytes: 512m, 2g, 11.2g.
func formatBytes(n int64) string {
	for i, u := range []string{"t", "g", "m"} {
		unit := int64(1) << (10 * (4 - i))
		if n >= unit && n%unit == 0 {
			return strconv.FormatInt(n/unit, 10) + u
		}
	}
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + "g"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "k"
	}
	return strconv.FormatInt(n, 10)
}

package netpolicy

import (
	"os"
	"strconv"
)

// TrustedOwner reports whether uid may own an approvals or policy file
// sbx reads rules from: root, the user sbx runs as, and the user who ran
// sudo (SUDO_UID) when it runs as root.
func TrustedOwner(uid uint32) bool {
	if uid == 0 || int64(uid) == int64(os.Geteuid()) || int64(uid) == int64(os.Getuid()) {
		return true
	}
	if os.Geteuid() == 0 {
		if s := os.Getenv("SUDO_UID"); s != "" {
			if n, err := strconv.ParseUint(s, 10, 32); err == nil && uint32(n) == uid {
				return true
			}
		}
	}
	return false
}

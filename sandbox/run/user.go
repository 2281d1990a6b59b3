package run

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/sbx-dev/sbx/sandbox"
)

// Why says how a User was chosen.
type Why string

// The ways a User is chosen.
const (
	// UserAsked: the caller named the user (Spec.User).
	UserAsked Why = "asked"
	// UserSudo: the user who ran sudo (SUDO_UID and SUDO_GID).
	UserSudo Why = "sudo"
	// UserOwner: the owner of the working directory, with the host's
	// layout.
	UserOwner Why = "owner"
	// UserNobody: nobody, when nothing else applies.
	UserNobody Why = "nobody"
)

// User is who a sandbox's command runs as, and why.
type User struct {
	UID, GID uint32
	// KeepImage lets an image's own user win when it is not root.
	KeepImage bool
	Why       Why
}

// ChooseUser picks the command's user when the caller names none: never
// root, and never root's group. Under sudo it is the user who ran sudo;
// with the host's layout (hostLayout) the owner of the working directory
// cwd (which the command shares read-write), unless that is root; with an
// image, the image's own user unless that is root; else nobody. A group 0
// found on the way (a directory of 1000:0, SUDO_GID=0) becomes nobody's
// group, since root's group could plant set-group-ID binaries and read
// what only root's group may. A root-owned working directory stays
// unwritable to the command rather than make it host root: anything it
// wrote there (a set-user-ID binary, say) would belong to root. The error
// is that of SUDO_UID and SUDO_GID that are not numbers.
func ChooseUser(hostLayout, image bool, cwd string) (User, error) {
	notRootGroup := func(gid uint32) uint32 {
		if gid == 0 {
			return sandbox.NobodyID
		}
		return gid
	}
	if u := os.Getenv("SUDO_UID"); u != "" && u != "0" {
		g := os.Getenv("SUDO_GID")
		uid, err1 := strconv.ParseUint(u, 10, 32)
		gid, err2 := strconv.ParseUint(g, 10, 32)
		if err1 != nil || err2 != nil {
			return User{}, fmt.Errorf("SUDO_UID=%s SUDO_GID=%s: want numbers, as sudo sets them; unset both, or name the user", u, g)
		}
		return User{UID: uint32(uid), GID: notRootGroup(uint32(gid)), Why: UserSudo}, nil
	}
	if hostLayout {
		if fi, err := os.Stat(cwd); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
				return User{UID: st.Uid, GID: notRootGroup(st.Gid), Why: UserOwner}, nil
			}
		}
	}
	return User{UID: sandbox.NobodyID, GID: sandbox.NobodyID, KeepImage: image, Why: UserNobody}, nil
}

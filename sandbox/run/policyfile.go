package run

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/netpolicy"
)

// A PolicyFileError refuses the policy's file (Policy: Spec.PolicyFile),
// or the file always answers write to (Approvals:
// Spec.Gateway.ApprovalsFile), or both when they are one, before anything
// is made: the rules a later run reads from it must be the user's, so a
// file someone else could change is not used. Reason is a *WritableError
// when the sandbox could write, replace or link the file (it lies in the
// working directory, a read-write volume, or is reached through one), an
// *UntrustedFileError when the file itself is not safe to trust (a
// symbolic link on its path, another owner, group- or other-writable,
// too large), or why sbx cannot tell.
type PolicyFileError struct {
	Path              string
	Policy, Approvals bool
	Reason            error
}

func (e *PolicyFileError) Error() string {
	what := "approvals file "
	switch {
	case e.Policy && e.Approvals:
		what = "policy file (which always answers write to) "
	case e.Policy:
		what = "policy file "
	}
	var we *WritableError
	if errors.As(e.Reason, &we) {
		return what + e.Path + ": " + we.Error() + ", so the command could change the rules later runs read from it"
	}
	return what + e.Path + ": " + e.Reason.Error()
}

func (e *PolicyFileError) Unwrap() error { return e.Reason }

// An UntrustedFileError says why a policy or approvals file is not safe
// to read rules from, and the fix.
type UntrustedFileError struct{ Why, Fix string }

func (e *UntrustedFileError) Error() string { return e.Why + "; " + e.Fix }

// checkPolicyFiles refuses the policy file and the approvals file (once,
// when they are one) when the sandbox could write them through writable,
// or when checkTrustedFile refuses them.
func checkPolicyFiles(policy, approvals string, writable []string) error {
	same := policy != "" && approvals != "" && sameFilePath(policy, approvals)
	pa, _ := filepath.Abs(policy)
	aa, _ := filepath.Abs(approvals)
	for i, f := range []PolicyFileError{{Path: policy, Policy: true, Approvals: same}, {Path: approvals, Approvals: true, Policy: same}} {
		if f.Path == "" || i == 1 && policy != "" && pa == aa {
			continue // one path, checked once; one file by two paths, each
		}
		if f.Reason = outsideOf(f.Path, writable); f.Reason != nil {
			return &f
		}
		max := int64(netpolicy.MaxPolicySize)
		if f.Approvals {
			max = approval.MaxFileSize
		}
		if f.Reason = checkTrustedFile(f.Path, max); f.Reason != nil {
			return &f
		}
	}
	return nil
}

// checkTrustedFile refuses path, a file sbx reads rules from, when
// someone other than root or the user running sbx (netpolicy.TrustedOwner)
// could change it: a symbolic link on its path (its own name included),
// a directory on the way owned by another user or writable by its group
// or others (a sticky one, such as /tmp, excepted: only an entry's owner
// may replace it there), or a file owned by another user, writable by its
// group or others, not a regular file, or larger than max. A file that
// does not exist yet passes (the first always answer makes it). The
// error is an *UntrustedFileError, or why the path cannot be looked at.
func checkTrustedFile(path string, max int64) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	at := "/"
	parts := strings.Split(abs, "/")
	for i, c := range parts {
		if c == "" && i < len(parts)-1 {
			continue
		}
		if c != "" {
			at = filepath.Join(at, c)
		}
		last := i == len(parts)-1
		fi, err := os.Lstat(at)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			real, rerr := filepath.EvalSymlinks(abs)
			if rerr != nil {
				real = "its real path"
			}
			return &UntrustedFileError{"reaching it goes through the symbolic link " + at + ", which could be repointed to another file", "give the file's real path (" + real + ")"}
		}
		uid, ok := ownerOf(fi)
		if !ok {
			return fmt.Errorf("cannot tell who owns %s", at)
		}
		perm := fi.Mode().Perm()
		if !last {
			switch {
			case !netpolicy.TrustedOwner(uid):
				return &UntrustedFileError{fmt.Sprintf("its directory %s is owned by uid %d, neither root nor the user running sbx, who could replace the file", at, uid), "keep the file in a directory of your own"}
			case perm&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0:
				return &UntrustedFileError{fmt.Sprintf("its directory %s has mode %04o, so its group or others could replace the file", at, perm), "chmod go-w " + at + ", or keep the file in a directory of your own"}
			}
			continue
		}
		switch {
		case !fi.Mode().IsRegular():
			return &UntrustedFileError{"it is not a regular file (" + fi.Mode().Type().String() + ")", "give a regular file"}
		case !netpolicy.TrustedOwner(uid):
			return &UntrustedFileError{fmt.Sprintf("it is owned by uid %d, neither root nor the user running sbx, who could change the rules later runs read from it", uid), "give a file of your own (chown it, or copy its rules into a new file)"}
		case perm&0o022 != 0:
			return &UntrustedFileError{fmt.Sprintf("its mode %04o lets its group or others write it, and so change the rules later runs read from it", perm), "chmod go-w " + abs}
		case fi.Size() > max:
			return &UntrustedFileError{fmt.Sprintf("it holds %d bytes, more than the %d sbx reads from it", fi.Size(), max), "move its rules into a smaller file"}
		}
	}
	return nil
}

// ownerOf returns the uid that owns fi's file.
func ownerOf(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

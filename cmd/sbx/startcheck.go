package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// Why a command cannot start, said in one line with the fix: sbx run's
// exit codes 126 and 127 never come without a word.

// accessProblem words e, found before the container started, as one line
// with the fix. rootfsFlag is --rootfs's value ("host" or a directory).
func accessProblem(e *rootfs.AccessError, rootfsFlag string) string {
	if e.Op == "find" {
		where := "the root filesystem " + rootfsFlag + " must hold it"
		switch {
		case e.Hint != "":
			where = e.Hint
		case rootfsFlag == "host":
			where = "the sandbox shows the host's /usr, /bin, /sbin, /lib*, /etc and /opt and the working directory, so a command installed elsewhere (~/.local/bin, /root, a version manager's shims) is not there; use one from those directories, or mount its directory with -v and give its path"
		}
		if e.SearchPath != "" {
			return fmt.Sprintf("%s: command not found in the sandbox's PATH (%s): %s", e.Path, e.SearchPath, where)
		}
		return fmt.Sprintf("%s: no such file in the sandbox: %s", e.Path, where)
	}
	what := e.Path
	switch {
	case e.Path == "/" && rootfsFlag != "host":
		what = "/, the root filesystem " + e.Source
	case e.Source != e.Path:
		what = fmt.Sprintf("%s (%s on the host)", e.Path, e.Source)
	}
	class, who := "o", "every user"
	switch {
	case e.Owner == e.UID:
		class, who = "u", "its owner"
	case e.Group == e.GID:
		class, who = "g", "its group"
	}
	fix := fmt.Sprintf("let %s %s it (chmod %s+x %s)", who, e.Op, class, e.Source)
	if e.Owner != e.UID {
		fix += fmt.Sprintf(", or run the command as its owner (--user %d)", e.Owner)
	}
	return fmt.Sprintf("uid %d cannot %s %s, which is %s with owner %d:%d; %s",
		e.UID, e.Op, what, e.Mode, e.Owner, e.Group, fix)
}

// startProblem words a *sandbox.StartError, the runtime's refusal to
// start the command (after sbx's own check found nothing, or could not
// look: an image), as one line with the fix.
func startProblem(se *sandbox.StartError, argv0 string, uid uint32, image bool) string {
	msg := se.Err.Error()
	if i := strings.Index(msg, "exec: "); i >= 0 {
		msg = msg[i+len("exec: "):]
	}
	msg = strings.TrimSuffix(msg, ": unknown")
	where := "the root filesystem"
	if image {
		where = "the image"
	}
	if se.Code == sandbox.ExitNotFound {
		return fmt.Sprintf("%s could not be started: %s; check that %s has it, on the PATH or at the path given", argv0, msg, where)
	}
	return fmt.Sprintf("%s could not be started: %s; check that uid %d may enter every directory on its way in %s and execute it (or give --user)", argv0, msg, uid, where)
}

// policyFileProblem words e, a policy or approvals file sbx run refuses,
// naming the flag that gave it, what is wrong and the fix: a file the
// sandbox could write is kept outside the project and its volumes.
func policyFileProblem(e *run.PolicyFileError) error {
	flag, fix := "--approvals", "keep approvals outside the project and read-write -v volumes: --approvals ~/.config/sbx/approvals.yaml"
	switch {
	case e.Policy && e.Approvals:
		flag, fix = "--policy", "keep the policy outside the project and read-write -v volumes: --policy ~/.config/sbx/policy.yaml (always answers then write there too, or give --approvals beside it)"
	case e.Policy:
		flag, fix = "--policy", "keep the policy outside the project and read-write -v volumes: --policy ~/.config/sbx/policy.yaml"
	}
	var (
		we *run.WritableError
		ue *run.UntrustedFileError
	)
	switch {
	case errors.As(e.Reason, &we):
		return fmt.Errorf("%s %s: %v, so the command could change the rules later runs read from it (and an always answer would keep them); %s", flag, e.Path, we, fix)
	case errors.As(e.Reason, &ue):
		return fmt.Errorf("%s %s: %v", flag, e.Path, ue)
	}
	return fmt.Errorf("%s %s: sbx cannot tell whether the sandbox could change it (%v), so it does not read rules from it; %s", flag, e.Path, e.Reason, fix)
}

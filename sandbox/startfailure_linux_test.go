package sandbox

import (
	"errors"
	"testing"
)

// TestStartFailure: only the runtime's failure to execute the command is
// the command's exit code 126 or 127; any other start failure that says
// "no such file or directory" (a mount source, a directory runc makes) is
// sbx's, and comes back as an error, with its message, not as a silent 127.
func TestStartFailure(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		code int // 0: not the command's
	}{
		{`failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "nosuch": executable file not found in $PATH: unknown`, ExitNotFound},
		{`OCI runtime create failed: runc create failed: unable to start container process: exec: "/x": stat /x: no such file or directory: unknown`, ExitNotFound},
		{`failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: "/dev/.sbx-init": stat /dev/.sbx-init: permission denied: unknown`, ExitCannotExecute},
		{`unable to start container process: exec: "/bin/x": exec format error: unknown`, ExitCannotExecute},
		{`failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error mounting "/gone" to rootfs at "/data": stat /gone: no such file or directory: unknown`, 0},
		{`runc create failed: unable to start container process: error during container init: mkdir /bin/busybox: not a directory: unknown`, 0},
		{`open /run/containerd/x: permission denied`, 0},
	} {
		code, ok := startFailure(errors.New(tc.msg))
		if ok != (tc.code != 0) || code != tc.code {
			t.Errorf("startFailure(%q) = %d, %v; want %d", tc.msg, code, ok, tc.code)
		}
	}
}

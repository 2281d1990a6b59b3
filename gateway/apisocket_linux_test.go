package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sbx-dev/sbx/netpolicy"
)

// TestAPISocketUserHelper is the second local user of
// TestPrivilegedAPISocketRefusesAnotherUser: run as nobody, it asks the
// management API socket SBX_API_SOCK for the policy without a token and
// prints what came of it. On its own it skips.
func TestAPISocketUserHelper(t *testing.T) {
	sock := os.Getenv("SBX_API_SOCK")
	if sock == "" {
		t.Skip("runs only as another user, started by TestPrivilegedAPISocketRefusesAnotherUser")
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://sbx/v1/policy")
	if err != nil {
		fmt.Println("RESULT error:", err)
		return
	}
	resp.Body.Close()
	fmt.Println("RESULT status", resp.StatusCode)
}

// TestPrivilegedAPISocketRefusesAnotherUser: a second local user (nobody)
// cannot open a gateway's management API socket. Two layers keep it out:
// the directory the gateway makes for it (0700), shown alone with the
// socket opened to everyone, and the socket's mode (0600, root's), shown
// alone with its directory opened to everyone; with both opened the same
// user connects (and gets 401 without the token), so the refusals were
// the layers', not a probe that could not connect anyway.
func TestPrivilegedAPISocketRefusesAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a probe as another user (CI runs as root)")
	}
	// A directory nobody may enter, for the test binary and the socket's
	// directory, as /run is.
	top, err := os.MkdirTemp("", "sbx-api-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(top, "gateway.test")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	sockDir := filepath.Join(top, "sbx")
	sock := filepath.Join(sockDir, "api.sock")
	p, _ := netpolicy.Compile(netpolicy.Spec{})
	g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", API: []string{"unix:" + sock}, TokenFile: filepath.Join(top, "token"), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })

	asNobody := func() string {
		t.Helper()
		cmd := exec.Command(bin, "-test.run", "^TestAPISocketUserHelper$", "-test.v")
		cmd.Dir = "/"
		cmd.Env = []string{"SBX_API_SOCK=" + sock}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		i := strings.Index(string(out), "RESULT ")
		if err != nil || i < 0 {
			t.Fatalf("the probe as nobody: %v\n%s", err, out)
		}
		line, _, _ := strings.Cut(string(out[i+len("RESULT "):]), "\n")
		return line
	}
	mode := func(path string, m os.FileMode) {
		t.Helper()
		if err := os.Chmod(path, m); err != nil {
			t.Fatal(err)
		}
	}
	made := func(path string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	dirMade, sockMade := made(sockDir), made(sock)
	for _, tt := range []struct {
		phase          string
		dirMode, sMode os.FileMode // 0: as the gateway made it
		want           string
	}{
		{"as the gateway makes them", 0, 0, "permission denied"},
		{"the socket alone, as the gateway made it (directory open to all)", 0o755, 0, "permission denied"},
		{"the directory alone, as the gateway made it (socket open to all)", 0, 0o666, "permission denied"},
		{"neither (the probe can connect)", 0o755, 0o666, fmt.Sprint("status ", http.StatusUnauthorized)},
	} {
		if tt.dirMode == 0 {
			tt.dirMode = dirMade
		}
		if tt.sMode == 0 {
			tt.sMode = sockMade
		}
		mode(sockDir, tt.dirMode)
		mode(sock, tt.sMode)
		got := asNobody()
		t.Logf("%s: %s", tt.phase, got)
		if !strings.Contains(got, tt.want) {
			t.Errorf("%s: a second local user's connection to the API socket: %s, want %s", tt.phase, got, tt.want)
		}
	}
}

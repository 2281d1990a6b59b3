package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUIOpenFile: the page that --open has the browser open is a file
// only its owner can read, in a directory only its owner can enter, and
// it sends the browser on to the view's URL (escaped as HTML).
func TestUIOpenFile(t *testing.T) {
	const viewURL = "http://127.0.0.1:4242/?token=0123abcd&x=<1>"
	path, err := openFile(viewURL, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(filepath.Dir(path))
	for _, tc := range []struct {
		path string
		want os.FileMode
	}{{path, 0o600}, {filepath.Dir(path), os.ModeDir | 0o700}} {
		fi, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != tc.want {
			t.Errorf("%s: got mode %v, want %v", tc.path, fi.Mode(), tc.want)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<meta http-equiv="refresh" content="0;url=http://127.0.0.1:4242/?token=0123abcd&amp;x=&lt;1&gt;">`,
		`<meta name="referrer" content="no-referrer">`,
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("page: lacks %q:\n%s", want, data)
		}
	}
}

// TestUIBrowserCommand: $BROWSER names the browser, split at spaces;
// without it, xdg-open.
func TestUIBrowserCommand(t *testing.T) {
	t.Setenv("BROWSER", "  firefox   --new-window ")
	if diff := cmp.Diff([]string{"firefox", "--new-window"}, browserCommand()); diff != "" {
		t.Errorf("browser command with BROWSER (-want +got):\n%s", diff)
	}
	t.Setenv("BROWSER", "")
	if diff := cmp.Diff([]string{"xdg-open"}, browserCommand()); diff != "" {
		t.Errorf("browser command without BROWSER (-want +got):\n%s", diff)
	}
}

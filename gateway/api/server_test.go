package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateToken(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "token")
	tok, err := LoadOrCreateToken(path)
	if err != nil || len(tok) != 64 {
		t.Fatalf("new token %q, %v; want 64 hex characters", tok, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("new token file mode %v, want 0600", fi.Mode().Perm())
	}
	if again, err := LoadOrCreateToken(path); err != nil || again != tok {
		t.Errorf("reading it back: %q, %v", again, err)
	}
	os.Chmod(path, 0o644)
	if _, err := LoadOrCreateToken(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a token file readable by others: %v, want an error saying chmod 600", err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if _, err := LoadOrCreateToken(short); err == nil {
		t.Errorf("a 3-character token was accepted")
	}
}

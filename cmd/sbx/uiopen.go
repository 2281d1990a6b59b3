package main

import (
	"bytes"
	"fmt"
	"html/template"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// openPage is the page sbx ui --open has the browser open: it sends the
// browser on to the view's URL, token and all, so that the token is in a
// file only the user can read and never in a command line, which every
// local user can read (/proc/PID/cmdline, ps). Jupyter opens its
// notebooks the same way.
var openPage = template.Must(template.New("open").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={{.}}">
<title>sbx ui</title>
</head>
<body><p>Opening <a href="{{.}}">sbx ui</a>…</p></body>
</html>
`))

// openFile writes the page that redirects to viewURL into a new directory
// of its own (mode 0700) as a file of mode 0600, both owned by uid and gid
// unless they are -1, and returns the file's path. The caller removes the
// directory.
func openFile(viewURL string, uid, gid int) (string, error) {
	var page bytes.Buffer
	if err := openPage.Execute(&page, viewURL); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "sbx-ui-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "open.html")
	err = os.WriteFile(path, page.Bytes(), 0o600)
	if err == nil && (uid != -1 || gid != -1) {
		if err = os.Chown(dir, uid, gid); err == nil {
			err = os.Chown(path, uid, gid)
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return path, nil
}

// browserCommand is the command that opens a page in the user's browser:
// $BROWSER split at spaces when it is set, else xdg-open (open on macOS).
// The page's file URL is added as its last argument.
func browserCommand() []string {
	if b := strings.Fields(os.Getenv("BROWSER")); len(b) > 0 {
		return b
	}
	if runtime.GOOS == "darwin" {
		return []string{"open"}
	}
	return []string{"xdg-open"}
}

// sudoUser returns the user who ran sbx through sudo (SUDO_UID and
// SUDO_GID), when sbx runs as root; ok is false otherwise.
func sudoUser() (uid, gid int, ok bool) {
	if os.Geteuid() != 0 {
		return 0, 0, false
	}
	u, err1 := strconv.Atoi(os.Getenv("SUDO_UID"))
	g, err2 := strconv.Atoi(os.Getenv("SUDO_GID"))
	if err1 != nil || err2 != nil || u == 0 {
		return 0, 0, false
	}
	return u, g, true
}

// openInBrowser opens viewURL in the user's browser through a file that
// redirects to it (openFile), never with the URL in a command line. Under
// sudo, the file is the sudo user's and the browser runs as that user. The
// browser runs in a process group of its own, so that Ctrl-C to sbx ui
// does not end it. It returns the file's path and a func that removes it,
// which the caller calls once the token is used, or when the view stops.
func openInBrowser(viewURL string) (string, func(), error) {
	uid, gid, sudo := sudoUser()
	owner, group := -1, -1
	if sudo {
		owner, group = uid, gid
	}
	path, err := openFile(viewURL, owner, group)
	if err != nil {
		return "", nil, fmt.Errorf("writing the page that opens the view: %w", err)
	}
	remove := func() { os.RemoveAll(filepath.Dir(path)) }
	argv := append(browserCommand(), (&url.URL{Scheme: "file", Path: path}).String())
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if sudo {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		env := os.Environ()
		if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			env = append(env, "HOME="+u.HomeDir, "USER="+u.Username, "LOGNAME="+u.Username)
		}
		cmd.Env = env
	}
	if err := cmd.Start(); err != nil {
		remove()
		return "", nil, fmt.Errorf("starting the browser (%s; set BROWSER to choose one): %w", argv[0], err)
	}
	// Reaps the browser, or the opener that hands the page to it; ends
	// when that process does, which may be after sbx ui.
	go cmd.Wait()
	return path, remove, nil
}

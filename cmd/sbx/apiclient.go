package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/sandbox"
)

// targetFlags say which gateway a command talks to: a running sandbox's
// (--sandbox ID) or any gateway's management API (--api ADDR --token-file
// FILE).
type targetFlags struct {
	// kube, when set, makes --sandbox name a sandbox on a cluster (sbx
	// kube policy ...), reached through a port-forward.
	kube      *kubeFlags
	sandbox   string
	api       string
	tokenFile string
	stateDir  string
}

func (f *targetFlags) AddFlags(fs *pflag.FlagSet) {
	if f.kube != nil {
		fs.StringVar(&f.sandbox, "sandbox", "", "talk to the sandbox `ID` on the cluster (its id, its --name, or a unique prefix of its id; see sbx kube ps)")
		return
	}
	fs.StringVar(&f.sandbox, "sandbox", "", "talk to the running sandbox `ID` (its id, its --name, or a unique prefix of its id; see sbx ps)")
	fs.StringVar(&f.api, "api", "", "talk to the management API at `ADDR` (host:port or unix:PATH) instead")
	fs.StringVar(&f.tokenFile, "token-file", "", "the API's bearer token `FILE`, with --api")
	fs.StringVar(&f.stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	fs.MarkHidden("state-dir")
}

// startWait bounds how long a command waits for a sandbox that is still
// starting.
const startWait = 30 * time.Second

// client resolves the flags to a client, with errors that say what to do.
func (f *targetFlags) client(ctx context.Context) (*api.Client, error) {
	if f.kube != nil {
		return kubeClient(ctx, f.kube, f.sandbox)
	}
	var addr, tokenFile string
	switch {
	case f.sandbox != "" && f.api != "":
		return nil, &exitError{code: exitUsage, err: errors.New("give --sandbox ID or --api ADDR, not both")}
	case f.sandbox != "":
		st, err := sandbox.Find(f.stateDir, f.sandbox)
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("%w, or use --api ADDR --token-file FILE with a token you can read", orNeedsRoot(err, "--sandbox"))
		} else if err != nil {
			return nil, err
		}
		// A sandbox is listed from the moment it is recorded; until its
		// API answers it is starting, and this waits for it.
		wctx, cancel := context.WithTimeout(ctx, startWait)
		st, err = sandbox.WaitRunning(wctx, f.stateDir, st.ID)
		cancel()
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, fmt.Errorf("sandbox %s ended; sbx ps lists the running ones", f.sandbox)
		} else if err != nil {
			return nil, err
		}
		dir := filepath.Join(f.stateDir, st.ID)
		if _, err := os.Stat(filepath.Join(dir, "api.sock")); err != nil {
			return nil, fmt.Errorf("sandbox %s has no management API socket (%v); sbx ps lists the running ones", st.ID, err)
		}
		addr, tokenFile = "unix:"+filepath.Join(dir, "api.sock"), filepath.Join(dir, "token")
	case f.api != "":
		if f.tokenFile == "" {
			return nil, &exitError{code: exitUsage, err: errors.New("--api needs --token-file FILE, the file the gateway keeps its token in")}
		}
		addr, tokenFile = f.api, f.tokenFile
	default:
		return nil, &exitError{code: exitUsage, err: errors.New("say which sandbox: --sandbox ID (sbx ps lists them), or --api ADDR --token-file FILE for a gateway")}
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("reading the API token: %w (the token file is readable by root only; use sudo)", err)
	}
	c, err := api.NewClient(addr, strings.TrimSpace(string(tok)))
	if err != nil {
		return nil, &exitError{code: exitUsage, err: fmt.Errorf("--api: %w", err)}
	}
	return c, nil
}

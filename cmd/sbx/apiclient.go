package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/sandbox"
)

// targetFlags say which gateway a command talks to: a running sandbox's
// (--sandbox ID) or any gateway's management API (--api ADDR --token-file
// FILE).
type targetFlags struct {
	sandbox   string
	api       string
	tokenFile string
	stateDir  string
}

func (f *targetFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.sandbox, "sandbox", "", "talk to the running sandbox `ID` (its id, its --name, or a unique prefix of its id; see sbx ps)")
	fs.StringVar(&f.api, "api", "", "talk to the management API at `ADDR` (host:port or unix:PATH) instead")
	fs.StringVar(&f.tokenFile, "token-file", "", "the API's bearer token `FILE`, with --api")
	fs.StringVar(&f.stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	fs.MarkHidden("state-dir")
}

// apiClient talks to one gateway's management API.
type apiClient struct {
	http  *http.Client
	base  string
	token string
}

// startWait bounds how long a command waits for a sandbox that is still
// starting.
const startWait = 30 * time.Second

// client resolves the flags to a client, with errors that say what to do.
func (f *targetFlags) client(ctx context.Context) (*apiClient, error) {
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
	c := &apiClient{token: strings.TrimSpace(string(tok)), base: "http://localhost"}
	tr := &http.Transport{}
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
	} else {
		c.base = "http://" + addr
	}
	c.http = &http.Client{Transport: tr}
	return c, nil
}

// do sends a request and decodes a JSON answer into out (unless nil). A
// non-2xx answer is an error carrying the API's message.
func (c *apiClient) do(ctx context.Context, method, path string, body io.Reader, hdr map[string]string, out any) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the management API does not answer (is the sandbox still running? sbx ps): %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return resp, errors.New(e.Error)
		}
		return resp, fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp, fmt.Errorf("reading the API's answer: %w", err)
		}
	}
	return resp, nil
}

// stream opens a streaming GET, for decisions?follow=1; the caller closes
// the body.
func (c *apiClient) stream(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the management API does not answer (is the sandbox still running? sbx ps): %w", err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return resp.Body, nil
}

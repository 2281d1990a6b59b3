package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// secretUsage is the help of --secret.
const secretUsage = "keep the value of the environment variable NAME out of the sandbox (`NAME@HOST[:PORT]`, or NAME=FILE@HOST[:PORT] to read it from FILE): " +
	"the sandbox's NAME holds a placeholder, which the gateway replaces with the value in the Authorization or x-api-key header of HTTPS requests to HOST (port 443 unless given) and blocks everywhere else; " +
	"several hosts as HOST,HOST or by giving the flag again; repeatable"

// secretHeaderUsage is the help of --secret-header.
const secretHeaderUsage = "put the value of --secret NAME in the request header HEADER (`NAME=HEADER`) instead of Authorization and x-api-key; " +
	"repeatable, for several headers"

// secretFlag is one --secret value, parsed: the secret it gives, and the
// value as written, for messages.
type secretFlag struct {
	netpolicy.Secret
	flag string
}

// parseSecretFlags parses the --secret values, reading nothing: NAME@HOSTS
// takes the value from sbx's environment variable NAME, NAME=FILE@HOSTS
// from FILE; HOSTS is HOST[:PORT] or several, separated by commas. A name
// given again adds its hosts, and must take its value from the same
// place. The secrets come in the order of their first flag. headers are
// the --secret-header values, NAME=HEADER: each names a credential header
// of the --secret NAME.
func parseSecretFlags(values, headers []string) ([]secretFlag, error) {
	var out []secretFlag
	at := map[string]int{}
	for _, v := range values {
		s, err := parseSecretFlag(v)
		if err != nil {
			return nil, err
		}
		i, seen := at[s.Name]
		if !seen {
			at[s.Name] = len(out)
			out = append(out, secretFlag{s, v})
			continue
		}
		prev := &out[i]
		if prev.FromEnv != s.FromEnv || prev.FromFile != s.FromFile {
			return nil, fmt.Errorf("--secret %s and --secret %s take %s's value from different places; give one", prev.flag, v, s.Name)
		}
		for _, h := range s.Hosts {
			if !slices.Contains(prev.Hosts, h) {
				prev.Hosts = append(prev.Hosts, h)
			}
		}
	}
	for _, v := range headers {
		name, header, ok := strings.Cut(v, "=")
		i, seen := at[name]
		switch {
		case !ok || name == "" || header == "":
			return nil, fmt.Errorf("--secret-header %q: write NAME=HEADER, e.g. --secret-header GITLAB_TOKEN=PRIVATE-TOKEN", v)
		case !seen:
			return nil, fmt.Errorf("--secret-header %s: no --secret %s; give --secret %s@HOST too (a policy's secret takes header: in the policy)", v, name, name)
		}
		sec := &out[i]
		sec.Headers = append(sec.Headers, header)
		if _, err := netpolicy.ParseSecretScope(sec.Secret); err != nil {
			return nil, fmt.Errorf("--secret-header %s: %w", v, err)
		}
	}
	return out, nil
}

// parseSecretFlag parses one --secret value.
func parseSecretFlag(v string) (netpolicy.Secret, error) {
	bad := func(why string) (netpolicy.Secret, error) {
		return netpolicy.Secret{}, fmt.Errorf("--secret %q: %s; write NAME@HOST[:PORT] (the value of sbx's environment variable NAME) or NAME=FILE@HOST[:PORT] (the value in FILE), e.g. --secret ANTHROPIC_API_KEY@api.anthropic.com", v, why)
	}
	i := strings.IndexAny(v, "=@")
	if i < 0 {
		return bad("no @HOST")
	}
	s := netpolicy.Secret{Name: v[:i]}
	if !netpolicy.ValidEnvName(s.Name) {
		return bad(fmt.Sprintf("%q is not an environment variable name (a letter or '_', then letters, digits and '_')", s.Name))
	}
	rest := v[i:]
	if rest[0] == '=' {
		j := strings.LastIndexByte(rest, '@')
		if j < 0 {
			return bad("no @HOST after the file")
		}
		s.FromFile, rest = rest[1:j], rest[j:]
		if s.FromFile == "" {
			return bad("an empty file name")
		}
	} else {
		s.FromEnv = s.Name
	}
	for _, h := range strings.Split(rest[1:], ",") {
		if _, err := netpolicy.ParseSecretHost(h); err != nil {
			return bad(err.Error())
		}
		s.Hosts = append(s.Hosts, h)
	}
	return s, nil
}

// readSecrets reads the values of the secrets of the policy p (read from
// policyFile, "" for none: its from_file paths are relative to its
// directory) and of the --secret flags, each name once, and returns them
// for the gateway. With dir (sbx gateway's --secret-dir, "" for none)
// every value is read from the file dir/NAME instead. A value that cannot
// be had is a *secrets.Error in an error that names the flag or the
// policy file.
func readSecrets(policyFile string, p *netpolicy.Policy, flags []secretFlag, dir string) ([]*secrets.Secret, error) {
	var out []*secrets.Secret
	inPolicy := map[string]bool{}
	fromDir := func(spec netpolicy.Secret) netpolicy.Secret {
		if dir != "" {
			spec.FromEnv, spec.FromFile = "", filepath.Join(dir, spec.Name)
		}
		return spec
	}
	for _, spec := range p.Secrets() {
		inPolicy[spec.Name] = true
		sec, err := secrets.Read(fromDir(spec), filepath.Dir(policyFile), nil)
		if err != nil {
			return nil, fmt.Errorf("%s: secrets: %w", policyFile, err)
		}
		out = append(out, sec)
	}
	for _, f := range flags {
		if inPolicy[f.Name] {
			return nil, fmt.Errorf("--secret %s: the policy %s has a secret %s too; give it once", f.flag, policyFile, f.Name)
		}
		sec, err := secrets.Read(fromDir(f.Secret), "", nil)
		if err != nil {
			return nil, fmt.Errorf("--secret %s: %w", f.flag, err)
		}
		out = append(out, sec)
	}
	return out, nil
}

// secretWording words a *secrets.Error with sbx's flags: where the
// value is wanted and how to give it.
func secretWording(err error) (string, string, bool) {
	var e *secrets.Error
	if !errors.As(err, &e) {
		return "", "", false
	}
	switch {
	case errors.Is(e.Err, secrets.ErrUnset):
		return e.Error(), fmt.Sprintf("the environment variable %s is not set in sbx's environment: export it before sbx starts (sudo drops it unless told: sudo --preserve-env=%s sbx ...), or read the value from a file (--secret %s=FILE@HOST, or from_file in a policy)", e.Env, e.Env, e.Name), true
	case errors.Is(e.Err, secrets.ErrEmpty) && e.File != "":
		return e.Error(), fmt.Sprintf("secret %s: the file %s holds no value: write the value in it", e.Name, e.File), true
	case errors.Is(e.Err, secrets.ErrEmpty):
		return e.Error(), fmt.Sprintf("the environment variable %s is empty: set it to the secret's value", e.Env), true
	case errors.Is(e.Err, secrets.ErrValue):
		return e.Error(), e.Error() + ": keep the value alone, on one line", true
	case errors.Is(e.Err, fs.ErrNotExist), errors.Is(e.Err, fs.ErrPermission):
		return e.Error(), fmt.Sprintf("secret %s: cannot read its value: %v: sbx reads it before the sandbox starts; give a file sbx can read", e.Name, e.Err), true
	}
	return "", "", false
}

// setPlaceholders gives the secrets the placeholders of sbx gateway's
// --secret-placeholder values, NAME=PLACEHOLDER (chosen by sbx kube run,
// which sets the agent pod's NAME to it), in place of their own.
func setPlaceholders(list []*secrets.Secret, values []string) error {
	for _, v := range values {
		name, ph, ok := strings.Cut(v, "=")
		i := slices.IndexFunc(list, func(s *secrets.Secret) bool { return s.Name() == name })
		switch {
		case !ok || name == "":
			return fmt.Errorf("--secret-placeholder %q: write NAME=PLACEHOLDER", v)
		case i < 0:
			return fmt.Errorf("--secret-placeholder %s: no secret %s in the policy or in --secret", v, name)
		}
		sec, err := list[i].WithPlaceholder(ph)
		if err != nil {
			return fmt.Errorf("--secret-placeholder: %w", err)
		}
		list[i] = sec
	}
	return nil
}

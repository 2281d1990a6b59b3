package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/netpolicy"
)

// checkOptions are the flags of sbx policy check.
type checkOptions struct {
	policy policyFlags
	target targetFlags // --sandbox ID or --api: the running policy instead of --policy
	method string
	path   string
	json   bool
}

func newPolicyCheckCmd() *cobra.Command {
	var o checkOptions
	cmd := &cobra.Command{
		Use:   "check [flags] TARGET",
		Short: "Print what a policy decides for a request",
		Long: `Check prints the verdict the gateway would give a request to TARGET under the
policy the flags describe: allow, block or intercept, the deciding rule and
the reason. It does no DNS: the address guard is applied when TARGET is an IP
address, while for a name it applies to the addresses the name resolves to.

TARGET is a URL or host[:port]:
  http://HOST[:PORT]/PATH   plain HTTP request, port 80 by default, method GET
  https://HOST[:PORT]/PATH  HTTPS, port 443 by default: a CONNECT tunnel.
                            Without TLS inspection the gateway sees only
                            its host and port and decides by them. When
                            the policy inspects HOST (--inspect, a rule
                            with inspect: true, methods, path or an
                            intercept), the gateway decrypts the tunnel
                            and decides each HTTPS request in it by its
                            method and path too: the verdict is the
                            request's (--method, GET by default, and PATH)
  ws://, wss://             as http://, https://
  HOST:PORT, [IPv6]:PORT    CONNECT tunnel to PORT
  HOST                      CONNECT tunnel to port 443
--method or --path make a HOST or HOST:PORT target a plain HTTP request (to
port 80 when no port is given); with an https:// target they describe the
request inside the tunnel, which only an inspected HOST's verdict depends
on: for any other host the verdict is the tunnel's. Paths are matched as the gateway matches them: escapes
decoded, dot segments resolved, repeated slashes merged.

Rules apply in this order: --intercept, --block, --allow, then the rules
of --policy FILE, or of the running policy of a sandbox (--sandbox ID) or
gateway (--api ADDR --token-file FILE). Exit codes: 0 when a verdict was printed, whatever it is;
1 when the policy file is invalid; 2 for a usage error.`,
		Example: `  # Allowed by a flag rule; CONNECT to port 443.
  sbx policy check --allow registry.npmjs.org registry.npmjs.org

  # Block beats allow.
  sbx policy check --allow '*.example.com' --block admin.example.com https://admin.example.com/

  # A plain HTTP request against a policy file, as JSON.
  sbx policy check --policy policy.yaml --json http://example.com/admin

  # The address guard refuses loopback even when the default allows.
  sbx policy check --default allow 127.0.0.1:8080

  # What a running sandbox would decide, and with one more rule.
  sudo sbx policy check --sandbox 1a2b3c4d api.github.com
  sudo sbx policy check --sandbox 1a2b3c4d --allow api.github.com api.github.com`,
		Args: exactArgs("TARGET"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := parseTarget(args[0], o.method, o.path)
			if err != nil {
				return usageError(cmd, err)
			}
			p, err := o.build(cmd)
			if err != nil {
				return err
			}
			d := p.Verdict(t)
			_, https := inspectedRequest(args[0], "", "", t)
			inspected := (t.IsConnect() || https) && p.Inspects(t.Host, t.Port)
			if https && !inspected && !t.IsConnect() {
				// --method or --path with an https:// target whose host
				// is not inspected: the gateway sees only the tunnel.
				t = netpolicy.Target{Host: t.Host, Port: t.Port, Method: "CONNECT"}
				d = p.Verdict(t)
			}
			if inspected && t.IsConnect() {
				// The gateway decrypts this host's tunnels
				// (docs/inspection.md): the tunnel opens unless no request
				// could pass, and an https:// URL's request is decided in it.
				d = p.DecideTunnel(t)
				if req, ok := inspectedRequest(args[0], o.method, o.path, t); ok && d.Action != netpolicy.Block {
					t, d = req, p.Verdict(req)
				}
			}
			if o.json {
				return writeDecisionJSON(cmd.OutOrStdout(), d)
			}
			return writeDecision(cmd.OutOrStdout(), p, t, d, inspected)
		},
	}
	fs := cmd.Flags()
	o.policy.AddFlags(fs)
	o.target.AddFlags(fs)
	fs.StringVar(&o.method, "method", "", "HTTP `METHOD` of a plain HTTP request (default GET)")
	fs.StringVar(&o.path, "path", "", "`PATH` of a plain HTTP request (default /, or the URL's)")
	fs.BoolVar(&o.json, "json", false, `print one JSON object {"action", "rule", "reason"}`)
	return cmd
}

// build makes the policy to check: the flags over the --policy file, or
// over the running policy of the sandbox or gateway named.
func (o *checkOptions) build(cmd *cobra.Command) (*netpolicy.Policy, error) {
	if o.target.sandbox == "" && o.target.api == "" {
		p, err := o.policy.Build()
		if err != nil {
			return nil, err
		}
		// The scripts a sandbox would read at start, checked as it would.
		if _, err := policyScripts(o.policy.Policy, p); err != nil {
			return nil, err
		}
		return p, nil
	}
	if o.policy.Policy != "" {
		return nil, usageErrorf(cmd, "give --policy FILE or a running policy (--sandbox ID, --api ADDR), not both")
	}
	return o.policy.buildOn(func() (netpolicy.Spec, string, error) {
		c, err := o.target.client(cmd.Context())
		if err != nil {
			return netpolicy.Spec{}, "", err
		}
		defer c.Close()
		p, err := c.Policy(cmd.Context())
		if err != nil {
			return netpolicy.Spec{}, "", err
		}
		source := "the running policy (version " + strconv.FormatUint(p.Version, 10) + ")"
		return p.Policy, source, nil
	})
}

// writeDecisionJSON writes d as one JSON object and a newline.
func writeDecisionJSON(w io.Writer, d netpolicy.Decision) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(d)
}

// writeDecision writes d for people:
//
//	block  GET http://example.com:80/admin
//	  rule:   default
//	  reason: no rule matched; the default is block
func writeDecision(w io.Writer, p *netpolicy.Policy, t netpolicy.Target, d netpolicy.Decision, inspected bool) error {
	var b strings.Builder
	what := describeTarget(t)
	if inspected && !t.IsConnect() {
		what = strings.Replace(what, " http://", " https://", 1)
	}
	fmt.Fprintf(&b, "%s  %s\n", d.Action, what)
	fmt.Fprintf(&b, "  rule:   %s\n", d.Rule)
	fmt.Fprintf(&b, "  reason: %s\n", d.Reason)
	if r := d.Response; d.Action == netpolicy.Intercept && r != nil && r.LLM != "" {
		fmt.Fprintf(&b, "  answer: the scripted LLM of %s\n", r.LLM)
	} else if d.Action == netpolicy.Intercept && r != nil {
		status := r.Status
		if status == 0 {
			status = 200
		}
		fmt.Fprintf(&b, "  answer: status %d, body of %s\n", status, plural(len(r.Body), "byte"))
	}
	if inspected {
		fmt.Fprintf(&b, "  inspected: the policy inspects this host, so the gateway decrypts its tunnels and decides each request\n")
	}
	// An unparseable target cannot be forwarded, audit mode or not.
	if p.Mode() == netpolicy.Audit && d.Action == netpolicy.Block && d.Rule != netpolicy.RuleInvalid {
		fmt.Fprintf(&b, "  audit:  the policy is in audit mode: this block would be logged but not enforced\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// describeTarget renders t as the request line a proxy would see:
// "CONNECT host:443" or "GET http://host:80/path".
func describeTarget(t netpolicy.Target) string {
	port := strconv.Itoa(int(t.Port))
	hostport := t.Host + ":" + port // as given, when it is invalid
	if h, err := netpolicy.NormalizeHost(t.Host); err == nil {
		hostport = net.JoinHostPort(h, port)
	}
	if t.IsConnect() {
		return "CONNECT " + hostport
	}
	return t.Method + " http://" + hostport + t.Path
}

// inspectedRequest is the request an https:// (or wss://) TARGET makes
// inside tunnel t, which the gateway inspects: --method (default GET) and
// --path or the URL's path (default /). It reports false for a host:port
// TARGET or --method CONNECT, which name the tunnel alone.
func inspectedRequest(arg, method, path string, t netpolicy.Target) (netpolicy.Target, bool) {
	u, err := url.Parse(arg)
	if err != nil || (u.Scheme != "https" && u.Scheme != "wss") || strings.EqualFold(method, "CONNECT") {
		return netpolicy.Target{}, false
	}
	if path == "" {
		path = u.EscapedPath()
	}
	if path == "" {
		path = "/"
	}
	if method == "" {
		method = "GET"
	}
	return netpolicy.Target{Host: t.Host, Port: t.Port, Method: strings.ToUpper(method), Path: cutQuery(path)}, true
}

// parseTarget turns a TARGET argument and the --method and --path flags
// into the request the gateway would see (see the help of policy check).
// The host is passed on as written, so that Decide, not this function,
// judges it: 127.1 or user@host give the verdict "invalid". Errors are for
// arguments that are not a target at all, and are usage errors.
func parseTarget(arg, method, path string) (netpolicy.Target, error) {
	if arg == "" {
		return netpolicy.Target{}, errors.New("empty TARGET; write host[:port] or a URL such as https://example.com/")
	}
	if method != "" {
		if !netpolicy.ValidMethod(method) {
			return netpolicy.Target{}, fmt.Errorf("--method %q is not an HTTP method; write e.g. --method POST", method)
		}
		method = strings.ToUpper(method)
	}
	if path != "" {
		if path[0] != '/' {
			return netpolicy.Target{}, fmt.Errorf("--path %q must start with '/', e.g. --path /v1/", path)
		}
		path = cutQuery(path)
		if method == "CONNECT" {
			return netpolicy.Target{}, errors.New("--path cannot go with --method CONNECT: a tunnel has no path")
		}
	}
	// plain is set when the flags ask for a plain HTTP request.
	plain := path != "" || (method != "" && method != "CONNECT")
	forceConnect := method == "CONNECT"

	var t netpolicy.Target
	defaultPort := uint16(443)
	var urlPath string
	if strings.Contains(arg, "://") {
		u, err := url.Parse(arg)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return netpolicy.Target{}, fmt.Errorf("TARGET %q is not a valid URL: %v", arg, err)
		}
		switch u.Scheme {
		case "http", "ws":
			defaultPort = 80
			plain = !forceConnect
		case "https", "wss":
		default:
			return netpolicy.Target{}, fmt.Errorf("TARGET %q: scheme %q is not supported; use http://, https://, ws:// or wss://, or write host[:port]", arg, u.Scheme)
		}
		if u.Host == "" {
			return netpolicy.Target{}, fmt.Errorf("TARGET %q has no host", arg)
		}
		t.Host = u.Hostname()
		if u.User != nil {
			// Keep the userinfo, so that Decide calls the target invalid
			// as the gateway would; never print a password.
			userinfo := u.User.Username()
			if _, ok := u.User.Password(); ok {
				userinfo += ":xxxxx"
			}
			t.Host = userinfo + "@" + t.Host
		}
		if p := u.Port(); p != "" {
			if t.Port, err = parsePort(p); err != nil {
				return netpolicy.Target{}, fmt.Errorf("TARGET %q: %w", arg, err)
			}
		}
		urlPath = u.EscapedPath()
		if path != "" && urlPath != "" && urlPath != "/" {
			return netpolicy.Target{}, fmt.Errorf("TARGET %q has a path and --path %s is given; give one of them", arg, path)
		}
	} else {
		host, portStr, hasPort, err := splitHostPort(arg)
		if err != nil {
			return netpolicy.Target{}, err
		}
		t.Host = host
		if hasPort {
			if t.Port, err = parsePort(portStr); err != nil {
				return netpolicy.Target{}, fmt.Errorf("TARGET %q: %w", arg, err)
			}
		} else if plain {
			defaultPort = 80
		}
	}
	if t.Port == 0 {
		t.Port = defaultPort
	}
	if !plain {
		t.Method = "CONNECT"
		return t, nil
	}
	t.Method = method
	if t.Method == "" {
		t.Method = "GET"
	}
	switch {
	case path != "":
		t.Path = path
	case urlPath != "":
		t.Path = urlPath
	default:
		t.Path = "/"
	}
	return t, nil
}

// splitHostPort splits a host[:port] TARGET. An IPv6 address takes
// brackets when it has a port, [2001:db8::1]:443; the brackets stay on the
// host, so that a name in brackets is judged invalid.
func splitHostPort(arg string) (host, port string, hasPort bool, err error) {
	switch {
	case strings.HasPrefix(arg, "["):
		end := strings.IndexByte(arg, ']')
		if end < 0 {
			return "", "", false, fmt.Errorf("TARGET %q: unclosed '['; write an IPv6 address as [2001:db8::1]:443", arg)
		}
		host, rest := arg[:end+1], arg[end+1:]
		if rest == "" {
			return host, "", false, nil
		}
		if rest[0] != ':' {
			return "", "", false, fmt.Errorf("TARGET %q: unexpected %q after ']'; write [2001:db8::1]:443", arg, rest)
		}
		return host, rest[1:], true, nil
	case strings.ContainsAny(arg, "/?#"):
		return "", "", false, fmt.Errorf("TARGET %q is neither host[:port] nor a URL; for a path write a URL such as http://%s", arg, strings.TrimLeft(arg, "/"))
	case strings.Count(arg, ":") > 1:
		return arg, "", false, nil // a bare IPv6 address
	}
	host, port, hasPort = strings.Cut(arg, ":")
	if host == "" {
		return "", "", false, fmt.Errorf("TARGET %q has no host", arg)
	}
	return host, port, hasPort, nil
}

// parsePort parses a target's TCP port, 1 to 65535, as rules do.
func parsePort(s string) (uint16, error) {
	p, err := netpolicy.ParsePort(s)
	if err != nil || p == netpolicy.AnyPort {
		return 0, fmt.Errorf("port %q: want a number from 1 to 65535", s)
	}
	return uint16(p), nil
}

// cutQuery cuts a query or fragment off path. The rest stays as written,
// percent-escapes and all, as the gateway sees it; the policy compares it
// in the form of netpolicy.CanonicalPath.
func cutQuery(path string) string {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		return path[:i]
	}
	return path
}

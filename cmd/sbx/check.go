package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

// checkLong is the help of sbx policy check.
const checkLong = `Check prints the verdict the gateway would give a request to TARGET under the
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
TARGET is parsed as the gateway parses what a client sends it: a target
the gateway refuses (userinfo, a bad port, percent-escapes or non-ASCII
in the host: write IDN as punycode) gets the verdict the gateway logs for
it, block by rule invalid, with the gateway's reason. A URL's fragment is
dropped, as clients drop it.
--method or --path make a HOST or HOST:PORT target a plain HTTP request (to
port 80 when no port is given); with an https:// target they describe the
request inside the tunnel, which only an inspected HOST's verdict depends
on: for any other host the verdict is the tunnel's. Paths are matched as the gateway matches them: escapes
decoded, dot segments resolved, repeated slashes merged.

Rules apply in this order: --intercept, --block, --allow, then the rules
of --policy FILE, or of the running policy of a sandbox (--sandbox ID) or
gateway (--api ADDR --token-file FILE). Exit codes: 0 when a verdict was printed, whatever it is;
1 when the policy file is invalid; 2 for a usage error.`

const checkExample = `  # Allowed by a flag rule; CONNECT to port 443.
  sbx policy check --allow registry.npmjs.org registry.npmjs.org

  # Block beats allow.
  sbx policy check --allow '*.example.com' --block admin.example.com https://admin.example.com/

  # A plain HTTP request against a policy file, as JSON.
  sbx policy check --policy policy.yaml --json http://example.com/admin

  # The address guard refuses loopback even when the default allows.
  sbx policy check --default allow 127.0.0.1:8080

  # What a running sandbox would decide, and with one more rule.
  sudo sbx policy check --sandbox 1a2b3c4d api.github.com
  sudo sbx policy check --sandbox 1a2b3c4d --allow api.github.com api.github.com`

func newPolicyCheckCmd() *cobra.Command {
	var o checkOptions
	cmd := &cobra.Command{
		Use:     "check [flags] TARGET",
		Short:   "Print what a policy decides for a request",
		Long:    checkLong,
		Example: checkExample,
		Args:    exactArgs("TARGET"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := o.request(args[0])
			if err != nil {
				return usageError(cmd, err)
			}
			p, err := o.build(cmd)
			if err != nil {
				return err
			}
			c, err := p.Check(req)
			if err != nil {
				return usageError(cmd, checkTargetError(args[0], o.path, err))
			}
			if o.json {
				return writeDecisionJSON(cmd.OutOrStdout(), c.Decision)
			}
			return writeDecision(cmd.OutOrStdout(), p, c)
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

// request maps TARGET, --method and --path to the request to check,
// saying which flag is wrong.
func (o *checkOptions) request(arg string) (netpolicy.Request, error) {
	if arg == "" {
		return netpolicy.Request{}, errors.New("empty TARGET; write host[:port] or a URL such as https://example.com/")
	}
	if o.method != "" && !netpolicy.ValidMethod(o.method) {
		return netpolicy.Request{}, fmt.Errorf("--method %q is not an HTTP method; write e.g. --method POST", o.method)
	}
	if o.path != "" && o.path[0] != '/' {
		return netpolicy.Request{}, fmt.Errorf("--path %q must start with '/', e.g. --path /v1/", o.path)
	}
	if o.path != "" && strings.EqualFold(o.method, "CONNECT") {
		return netpolicy.Request{}, errors.New("--path cannot go with --method CONNECT: a tunnel has no path")
	}
	return netpolicy.Request{URL: arg, Method: o.method, Path: o.path}, nil
}

// checkTargetError says what is wrong with TARGET arg, err being what
// Policy.Check said.
func checkTargetError(arg, path string, err error) error {
	if errors.Is(err, netpolicy.ErrTwoPaths) {
		return fmt.Errorf("TARGET %q has a path and --path %s is given; give one of them", arg, path)
	}
	return fmt.Errorf("TARGET %q: %w", arg, err)
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

// writeDecision writes the verdict c for people:
//
//	block  GET http://example.com:80/admin
//	  rule:   default
//	  reason: no rule matched; the default is block
func writeDecision(w io.Writer, p *netpolicy.Policy, c netpolicy.Checked) error {
	var b strings.Builder
	d := c.Decision
	fmt.Fprintf(&b, "%s  %s\n", d.Action, describeChecked(c))
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
	if c.Inspected {
		fmt.Fprintf(&b, "  inspected: the policy inspects this host, so the gateway decrypts its tunnels and decides each request\n")
	}
	// An unparseable target cannot be forwarded, audit mode or not.
	if p.Mode() == netpolicy.Audit && d.Action == netpolicy.Block && d.Rule != netpolicy.RuleInvalid {
		fmt.Fprintf(&b, "  audit:  the policy is in audit mode: this block would be logged but not enforced\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// describeChecked renders the request c decided as a proxy would see it,
// or as sent when the gateway refuses it: "CONNECT host:443",
// "GET http://host:80/path", or "GET https://host:443/path" for a request
// in an inspected tunnel.
func describeChecked(c netpolicy.Checked) string {
	if c.Refused != "" {
		return c.Target.Method + " " + c.Refused
	}
	what := describeTarget(c.Target)
	if c.Inspected && !c.Target.IsConnect() {
		what = strings.Replace(what, " http://", " https://", 1)
	}
	return what
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

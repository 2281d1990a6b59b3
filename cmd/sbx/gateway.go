package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbx-dev/sbx/gateway"
)

// gatewayOptions are the flags of sbx gateway.
type gatewayOptions struct {
	policy     policyFlags
	listen     string
	api        []string
	tokenFile  string
	resolve    []string
	log        string
	logLimits  logLimitFlags
	caCert     string
	upstreamCA string
	mockLLM    []string
}

func newGatewayCmd() *cobra.Command {
	var o gatewayOptions
	cmd := &cobra.Command{
		Use:   "gateway [flags]",
		Short: "Run the gateway alone: a deciding, logging HTTP proxy",
		Long: `Gateway runs sbx's gateway without a sandbox, for containers or hosts that sbx
did not start: an HTTP forward proxy and CONNECT tunnel that decides every
request by the policy, refuses private and special addresses (the address
guard), and logs every decision as JSON Lines.

Point clients at it with HTTP_PROXY and HTTPS_PROXY. With --api it also
serves the management API (docs/api.md), where rules can be changed while
it runs; every request there needs the bearer token in --token-file.

With --ca-cert FILE, hosts the policy inspects (rules with inspect,
methods, path or intercept; --inspect) have their TLS terminated with
certificates from a CA made at start and held only in memory, valid for 7
days; FILE gets its certificate, which the clients must trust. Without it
such hosts' tunnels are decided as a whole, as without inspection.

With --mock-llm HOST=SCRIPT, requests to HOST are answered from the script
by a mock LLM and never reach the network, whatever the policy says. Plain
http:// base URLs work as they are; HTTPS to HOST needs --ca-cert (the mock
terminates TLS), and without it a CONNECT to HOST is refused.

It runs until interrupted (Ctrl-C or SIGTERM), then closes its listeners,
ends open tunnels and flushes the decision log.`,
		Example: `  # Allow the npm registry, block the rest, log decisions to a file.
  sbx gateway --allow registry.npmjs.org --log decisions.jsonl

  # With the management API on a unix socket.
  sbx gateway --policy policy.yaml --api unix:/run/sbx/gw.sock --token-file /run/sbx/gw.token

  # A scripted model for an agent under test, over http:// and HTTPS.
  sbx gateway --mock-llm api.anthropic.com=script.yaml --ca-cert ca.pem

  # Test against a local server under a fake name.
  sbx gateway --allow api.test:8080 --resolve api.test=127.0.0.1 --allow-private 127.0.0.0/8`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.policy.Check(); err != nil {
				return err
			}
			if err := o.check(); err != nil {
				return usageError(cmd, err)
			}
			p, err := o.policy.Build()
			if err != nil {
				return err
			}
			scripts, err := policyScripts(o.policy.Policy, p)
			if err != nil {
				return err
			}
			logLimits, err := o.logLimits.Options()
			if err != nil {
				return usageError(cmd, err)
			}
			if o.log != "" {
				if err := o.logLimits.checkExisting(o.log); err != nil {
					return err
				}
			}
			res := &gateway.Resolver{}
			for _, v := range o.resolve {
				host, ip, err := gateway.ParseStatic(v)
				if err != nil {
					return usageError(cmd, err)
				}
				if err := res.AddStatic(host, ip); err != nil {
					return usageError(cmd, err)
				}
			}
			// A CA only where clients can be told to trust it: without
			// one, an inspected host's CONNECT is refused with a 403 that
			// says why, rather than a TLS failure no client explains.
			var ca *gateway.CA
			if o.caCert != "" {
				if ca, err = gateway.NewCA("gateway", caLifetime); err != nil {
					return err
				}
				if err := ca.WriteCertFile(o.caCert); err != nil {
					return fmt.Errorf("--ca-cert: %w", err)
				}
			}
			mocks, err := parseMockLLM(o.mockLLM)
			if err != nil {
				return usageError(cmd, err)
			}
			var roots *x509.CertPool
			if o.upstreamCA != "" {
				if roots, err = upstreamRoots(o.upstreamCA); err != nil {
					return err
				}
			}
			g, err := gateway.Start(cmd.Context(), gateway.Options{
				Listen:        o.listen,
				API:           o.api,
				TokenFile:     o.tokenFile,
				Policy:        p,
				Resolver:      res,
				LogFile:       o.log,
				LogLimits:     logLimits,
				Logger:        slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)),
				CA:            ca,
				UpstreamRoots: roots,
				MockLLM:       mocks,
				LLMScripts:    scripts,
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "sbx gateway: proxy on %s (policy: %s, default %s, mode %s)\n",
				g.ProxyAddr, plural(len(p.Rules()), "rule"), p.Default(), p.Mode())
			for _, a := range g.APIAddrs {
				fmt.Fprintf(out, "sbx gateway: management API on %s (token in %s)\n", a, o.tokenFile)
			}
			if o.log != "" {
				fmt.Fprintf(out, "sbx gateway: decision log in %s\n", o.log)
			}
			<-cmd.Context().Done()
			fmt.Fprintln(out, "sbx gateway: stopping")
			return g.Close()
		},
	}
	fs := cmd.Flags()
	o.policy.AddFlags(fs)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:3128", "proxy listen `ADDR` (host:port)")
	fs.StringArrayVar(&o.api, "api", nil, "serve the management API on `ADDR`: host:port or unix:PATH; repeatable")
	fs.StringVar(&o.tokenFile, "token-file", "", "the API's bearer token `FILE`; a random token is written there (mode 0600) when it is missing")
	fs.StringArrayVar(&o.resolve, "resolve", nil, "answer `HOST=IP` for HOST before asking DNS; repeatable")
	fs.StringVar(&o.log, "log", "", "write the decision log (JSON Lines) to `FILE`, new or empty unless --log-append")
	fs.StringVar(&o.caCert, "ca-cert", "", "inspect TLS where the policy asks, with a CA made now whose certificate is written to `FILE` (PEM), for the clients to trust")
	fs.StringVar(&o.upstreamCA, "upstream-ca", "", "trust the CA certificates (PEM) in `FILE` besides the host's roots when verifying the upstreams of inspected HTTPS requests")
	fs.StringArrayVar(&o.mockLLM, "mock-llm", nil, mockLLMUsage+" (HTTPS needs --ca-cert)")
	o.logLimits.AddFlags(fs)
	return cmd
}

// check checks the values of the flags that are not policy flags, before
// anything is read or started: each error names its flag and the fix.
func (o *gatewayOptions) check() error {
	if err := checkHostPort("--listen", o.listen); err != nil {
		return err
	}
	for _, a := range o.api {
		if path, ok := strings.CutPrefix(a, "unix:"); ok {
			if path == "" {
				return fmt.Errorf("--api %q: want unix:PATH with a path, e.g. --api unix:/run/sbx/gw.sock", a)
			}
			continue
		}
		if err := checkHostPort("--api", a); err != nil {
			return fmt.Errorf("%w, or unix:PATH", err)
		}
	}
	if len(o.api) > 0 && o.tokenFile == "" {
		return errors.New("--api needs --token-file FILE: the API's bearer token is kept there (a random one is written when it is missing)")
	}
	if _, err := o.logLimits.Options(); err != nil {
		return err
	}
	for _, v := range o.resolve {
		if _, _, err := gateway.ParseStatic(v); err != nil {
			return err
		}
	}
	for _, v := range o.mockLLM {
		if _, _, err := splitLLMFlag("mock-llm", v); err != nil {
			return err
		}
	}
	return nil
}

// checkHostPort checks a flag's host:port address to listen on: an IP or
// name (empty for every address) and a port number (0 for any free one).
func checkHostPort(flag, v string) error {
	_, port, err := net.SplitHostPort(v)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("%s %q: want host:port, e.g. %s 127.0.0.1:3128", flag, v, flag)
	}
	return nil
}

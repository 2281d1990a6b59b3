package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// gatewayFlags are the flags with which sbx gateway and sbx run configure
// their gateway alike: both commands embed them, define them with
// addFlags and build their gateway.Config from them with config and
// read, so that a flag added here is taken by both and means the same in
// both (TestGatewayConfigSameFromSameFlags). What only one command has,
// or what a sandbox implies, each command sets itself.
type gatewayFlags struct {
	policy     policyFlags
	resolve    []string
	hostDNS    string
	log        string
	logLimits  logLimitFlags
	api        []string
	upstreamCA string
	mockLLM    []string
	recordLLM  []string
	// mockJournal is --mock-journal: where the mocks' journal is kept.
	mockJournal string
	// secrets are --secret's values.
	secrets []string
	// secretHeaders are --secret-header's values.
	secretHeaders []string
	// secretDir is sbx gateway's --secret-dir: the directory every
	// secret's value is read from, by its name, instead of the variable
	// or file its binding names ("" for those). sbx run has no such flag.
	secretDir string
	// scriptFiles are sbx gateway's --llm-script values: the file of each
	// LLM script the policy names, by its name, in place of the path the
	// name gives (nil for those). sbx run has no such flag.
	scriptFiles map[string]string
}

// gatewayFlagUsage is the help of the gateway flags whose words differ
// between the commands (a sandbox's log has a default, its API a socket).
type gatewayFlagUsage struct {
	log, api, mockLLM, recordLLM, mockJournal string
}

// addFlags defines the gateway flags in fs.
func (f *gatewayFlags) addFlags(fs *pflag.FlagSet, u gatewayFlagUsage) {
	f.policy.AddFlags(fs)
	fs.StringArrayVar(&f.resolve, "resolve", nil, "answer `HOST=IP` for HOST before asking DNS; repeatable")
	fs.StringVar(&f.hostDNS, "host-dns", "", "resolve allowed names on the host with the DNS server `IP[:PORT]` instead of the host's resolver")
	fs.StringVar(&f.log, "log", "", u.log)
	f.logLimits.AddFlags(fs)
	fs.StringArrayVar(&f.api, "api", nil, u.api)
	fs.StringVar(&f.upstreamCA, "upstream-ca", "", "trust the CA certificates (PEM) in `FILE` besides the host's roots when verifying the upstreams of inspected HTTPS requests")
	fs.StringArrayVar(&f.mockLLM, "mock-llm", nil, u.mockLLM)
	fs.StringArrayVar(&f.recordLLM, "record-llm", nil, u.recordLLM)
	fs.StringVar(&f.mockJournal, "mock-journal", "", u.mockJournal)
	fs.StringArrayVar(&f.secrets, "secret", nil, secretUsage)
	fs.StringArrayVar(&f.secretHeaders, "secret-header", nil, secretHeaderUsage)
}

// checkValues checks the gateway flags' values but the policy flags' and
// --api's (which the commands check each in their way), reading no file:
// the first bad value's error names its flag and the fix.
func (f *gatewayFlags) checkValues() error {
	if _, err := f.logLimits.Options(); err != nil {
		return err
	}
	if f.hostDNS != "" {
		if _, err := gateway.ServerResolver(f.hostDNS); err != nil {
			return fmt.Errorf("--host-dns: %w", err)
		}
	}
	for _, v := range f.resolve {
		if _, _, err := gateway.ParseStatic(v); err != nil {
			return err
		}
	}
	for _, v := range f.mockLLM {
		if _, _, err := splitLLMFlag("mock-llm", v); err != nil {
			return err
		}
	}
	// Recorders are only made here, not kept: the scripts' directories
	// are checked.
	if _, err := parseRecordLLM(f.recordLLM, nil); err != nil {
		return err
	}
	if _, err := parseSecretFlags(f.secrets, f.secretHeaders); err != nil {
		return err
	}
	return nil
}

// config is the gateway configuration of the flags that name no file to
// read: the decision log's file and limits, the mock journal's file, the
// API's addresses, and the file always answers write to.
func (f *gatewayFlags) config() (gateway.Config, error) {
	limits, err := f.logLimits.Options()
	if err != nil {
		return gateway.Config{}, err
	}
	return gateway.Config{LogFile: f.log, LogLimits: limits, API: f.api, MockJournal: f.mockJournal, ApprovalsFile: f.policy.approvalsFile()}, nil
}

// read reads what the flags name into cfg: the policy and the LLM
// scripts it names, the mocks, the resolver's settings, the upstreams'
// CA, the values of the secrets of the policy and of --secret. It returns the recordings --record-llm asks for, which the command
// makes recorders of.
func (f *gatewayFlags) read(cmd *cobra.Command, cfg *gateway.Config) ([]run.Recording, error) {
	p, err := f.policy.Build()
	if err != nil {
		return nil, err
	}
	cfg.Policy = p
	if cfg.LLMScripts, err = policyScriptsFrom(f.policy.Policy, p, f.scriptFiles); err != nil {
		return nil, err
	}
	secrets, err := parseSecretFlags(f.secrets, f.secretHeaders)
	if err != nil {
		return nil, usageError(cmd, err)
	}
	if cfg.Secrets, err = readSecrets(f.policy.Policy, p, secrets, f.secretDir); err != nil {
		return nil, err
	}
	if cfg.MockLLM, err = parseMockLLM(f.mockLLM); err != nil {
		return nil, usageError(cmd, err)
	}
	recordings, err := parseRecordLLM(f.recordLLM, cfg.MockLLM)
	if err != nil {
		return nil, usageError(cmd, err)
	}
	res := &gateway.Resolver{}
	if f.hostDNS != "" {
		if res.System, err = gateway.ServerResolver(f.hostDNS); err != nil {
			return nil, fmt.Errorf("--host-dns: %w", err)
		}
	}
	for _, v := range f.resolve {
		host, ip, err := gateway.ParseStatic(v)
		if err == nil {
			err = res.AddStatic(host, ip)
		}
		if err != nil {
			return nil, usageError(cmd, err)
		}
	}
	cfg.Resolver = res
	if f.upstreamCA != "" {
		if cfg.UpstreamRoots, err = upstreamRoots(f.upstreamCA); err != nil {
			return nil, err
		}
	}
	return recordings, nil
}

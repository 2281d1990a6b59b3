package main

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/sandbox"
)

// liveSink prints each decision as one short line while the sandbox runs,
// and one line for each inspected tunnel whose client refused the sbx CA;
// show says which of them (the zero value, all). A mock LLM's fixed
// answers to requests that are not for a model (decisionlog.ReasonMockDefault)
// get no line at any level: they are expected, and in the decision log.
type liveSink struct {
	w    io.Writer
	show showLevel
	// noQuestions leaves the approval records to the prompt on the
	// terminal (prompt.go), which asks their questions and says their
	// answers there.
	noQuestions bool
	// onlyQuestions prints the approval records alone: with -t the
	// command owns the terminal, and a question, which holds a request
	// until someone answers, is the one thing worth a line in its output.
	onlyQuestions bool
}

// showLevel is which live lines sbx run prints (--show).
type showLevel int

const (
	// showAll prints every decision and CA rejection.
	showAll showLevel = iota
	// showBlocks prints what the user may have to act on: refusals
	// (enforced or, in audit mode, not), a mock LLM's errors for requests
	// no turn was for, and CA rejections.
	showBlocks
	// showNone prints nothing.
	showNone
)

// showLevels are --show's values, by level.
var showLevels = []string{showAll: "all", showBlocks: "blocks", showNone: "none"}

// parseShow returns the level a --show value names.
func parseShow(s string) (showLevel, error) {
	for l, name := range showLevels {
		if s == name {
			return showLevel(l), nil
		}
	}
	return 0, fmt.Errorf("--show %q: want all (every decision), blocks (refusals and errors) or none", s)
}

// shows reports whether the decision r gets a line at level l.
func (l showLevel) shows(r *decisionlog.Record) bool {
	switch {
	case l == showNone || strings.HasPrefix(r.Reason, decisionlog.ReasonMockDefault):
		return false
	case l == showBlocks:
		return r.Action == string(netpolicy.Block) || strings.HasPrefix(r.Reason, decisionlog.ReasonMockUnmatched)
	}
	return true
}

// Quick checks of a record's line before it is decoded: the fields
// AppendJSON writes.
var (
	liveDecision   = []byte(`"` + decisionlog.FieldEvent + `":"` + decisionlog.EventDecision + `"`)
	liveClose      = []byte(`"` + decisionlog.FieldEvent + `":"` + decisionlog.EventClose + `"`)
	liveCARejected = []byte(`"` + decisionlog.FieldError + `":"` + decisionlog.ErrorCARejected)
)

// WriteRecord prints a decision record, or the close record of a tunnel
// whose client rejected the sbx CA. Host and path come from the sandbox,
// so control characters are replaced before they reach the user's
// terminal.
func (s *liveSink) WriteRecord(_ uint64, line []byte) error {
	if s.show == showNone {
		return nil
	}
	if bytes.Contains(line, liveApproval) { // a question, and the command that answers it: something to act on, at every level
		if s.noQuestions {
			return nil
		}
		return writeApprovalLine(s.w, line)
	}
	if s.onlyQuestions {
		return nil
	}
	if !bytes.Contains(line, liveDecision) && !(bytes.Contains(line, liveClose) && bytes.Contains(line, liveCARejected)) {
		return nil
	}
	var r decisionlog.Record
	if err := decisionlog.Decode(line, &r); err != nil {
		return nil
	}
	target := liveTarget(&r)
	switch r.Event {
	case decisionlog.EventDecision:
		if !s.show.shows(&r) {
			return nil
		}
	case decisionlog.EventClose:
		if !strings.HasPrefix(r.Error, decisionlog.ErrorCARejected) {
			return nil
		}
		_, err := fmt.Fprintf(s.w, "sbx: %-9s %s%s  (%s)\n", "ca-reject", printable(target), printable(recordProcess(&r)), printable(caRejectedHint(r.Host)))
		return err
	default:
		return nil
	}
	why := recordReason(&r) // "rule r1: allow x", "address guard: ...", "no rule matched; the default is block"
	if !strings.Contains(why, r.Rule) {
		why = r.Rule + ": " + why
	}
	if hint := guardHint(&r); hint != "" {
		why += "; " + hint
	}
	_, err := fmt.Fprintf(s.w, "sbx: %-9s %s%s  (%s)\n", r.Action, printable(target), printable(recordProcess(&r)), printable(why))
	return err
}

// liveTarget is what a live line says r was about.
func liveTarget(r *decisionlog.Record) string {
	target := recordTarget(r)
	switch {
	case r.Method == "CONNECT":
		target = "CONNECT " + target
	case r.Kind == "transparent":
		if r.Method == "" {
			target = "transparent " + target
		} else {
			target += " (transparent)"
		}
	case r.Kind == "bypass":
		target = "bypass " + target
	}
	return target
}

// guardHint says how to exempt the addresses the address guard refused
// for r, "--allow-private ADDR/32" for each that r lists (its addrs), or
// "" when r is not such a refusal or lists none (the gateway's own, this
// host's or the sandbox pool's addresses, which no flag lets through).
func guardHint(r *decisionlog.Record) string {
	if r.Event != decisionlog.EventDecision || r.Rule != "guard" || !strings.HasPrefix(r.Reason, decisionlog.ReasonGuard) {
		return ""
	}
	var flags []string
	addrs := r.Addrs
	for i := 0; addrs != "" && i < decisionlog.MaxAddrs; i++ {
		var a string
		a, addrs, _ = strings.Cut(addrs, ",")
		if ip, err := netip.ParseAddr(a); err == nil && ip.Zone() == "" {
			flags = append(flags, "--allow-private "+netip.PrefixFrom(ip, ip.BitLen()).String())
		}
	}
	if len(flags) == 0 {
		return ""
	}
	return "if it is meant to be there (a mirror, a lab network), run with " + strings.Join(flags, " ") + " (allow_private in a policy file)"
}

// caRejectedHint says, of a tunnel to host whose client refused the sbx
// CA, why and what to do.
func caRejectedHint(host string) string {
	return fmt.Sprintf("the client does not trust the sbx CA, so this inspected connection failed: point it at the CA "+
		"(sbx sets SSL_CERT_FILE=%[1]s/bundle.pem, NODE_EXTRA_CA_CERTS=%[1]s/ca.pem and the like; a client that reads none of them, "+
		"or pins certificates, needs its own setting), or stop inspecting %[2]s (no --inspect or --intercept for it, "+
		"no inspect, methods, path or intercept in its rules)", sandbox.TrustDir, host)
}

func (s *liveSink) Flush() error { return nil }
func (s *liveSink) Close() error { return nil }

package approval

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Answer answers the pending question id with a and wakes the requests
// waiting on it. A session answer first adds a rule for what the
// question is about (allow, or block for a deny; answerRuleOf) to the
// running policy, before its first ask rule (or last, when it has none),
// so that later requests are decided without a question; an always
// answer first writes that rule to Config.File too (an error, such as
// ErrNoFile, leaves the question pending and the policy as it was). The
// answer is logged as an approval record. It returns the question as it
// stood.
//
// Errors: ErrInvalidAnswer for a scope or an a.By that is not one of
// Scopes or Answerers, ErrNotFound when id is not pending (answered
// already, timed out, never asked), ErrAnswered when another answer
// claimed it first, ErrNoFile, and those of the policy store and of
// writing the file.
func (r *Registry) Answer(id string, a Answer) (Approval, error) {
	if !IsScope(string(a.Scope)) {
		return Approval{}, fmt.Errorf("%w: scope %q; answer %s", ErrInvalidAnswer, a.Scope, orList(scopeWords))
	}
	if !IsAnswerer(a.By) {
		// by is written into the decision log: only the known answerers
		// (timeout is the registry's own word, never an answer's).
		return Approval{}, fmt.Errorf("%w: by %q; say who answers (%s)", ErrInvalidAnswer, a.By, strings.Join(answerers, ", "))
	}
	_, key, ok := r.t.getKey(id)
	if !ok {
		return Approval{}, notFoundError(id)
	}
	if a.Scope == ScopeAlways && r.cfg.File == "" {
		return Approval{}, fmt.Errorf("%w: this gateway has no file to write an always answer to; answer with scope session, or give the gateway an approvals file (a YAML policy file)", ErrNoFile)
	}
	// The answer claims the question before it has any effect: a second
	// answer meanwhile is refused, and writes no rule.
	if _, err := r.t.claim(id, a.By); errors.Is(err, ErrNotFound) {
		return Approval{}, notFoundError(id)
	} else if err != nil {
		return Approval{}, err
	}
	if a.Scope != ScopeOnce {
		if err := r.answerRule(id, key, a); err != nil {
			r.t.unclaim(id)
			return Approval{}, err
		}
	}
	got, err := r.t.answer(id, a)
	if err != nil {
		return Approval{}, fmt.Errorf("%w %q: the gateway closed while the answer was being written (its rule stands)", ErrNotFound, id)
	}
	return got, nil
}

// notFoundError is Answer's error for question id, not pending.
func notFoundError(id string) error {
	return fmt.Errorf("%w %q: it was answered, timed out, or never asked; GET /v1/approvals lists the pending ones", ErrNotFound, id)
}

// orList writes words for a message: "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// answerRule adds the rule of the session or always answer a to question
// id, about key, to the running policy, after writing it to Config.File
// for an always answer.
func (r *Registry) answerRule(id string, key questionKey, a Answer) error {
	action := netpolicy.Block
	if a.Allow {
		action = netpolicy.Allow
	}
	rule := answerRuleOf(key, action)
	if a.Scope == ScopeAlways {
		comment := fmt.Sprintf("%s %s by %s at %s (sbx, question %s)", verbOf(a), scopeWord(a.Scope), a.By, time.Now().UTC().Format(time.RFC3339), id)
		if err := AddApprovedRule(r.cfg.File, rule, comment); err != nil {
			return fmt.Errorf("writing the always answer's rule: %w", err)
		}
	}
	return r.addRule(rule)
}

// answerRuleOf is the rule of a session or always answer to the question
// about q, with action: no wider than the question, as rules can say it.
// A question about a request (plain HTTP, or inside an inspected tunnel)
// gives a rule for its host, port, method and path (a path rule matches
// the paths below it too); a tunnel's, its host and port.
func answerRuleOf(q questionKey, action netpolicy.Action) netpolicy.Rule {
	r := netpolicy.Rule{Host: q.host, Ports: []netpolicy.Port{netpolicy.Port(q.port)}, Action: action}
	if q.method != "" && q.method != "CONNECT" {
		r.Methods = []string{strings.ToUpper(q.method)}
		r.Path = netpolicy.CanonicalPath(q.path)
	}
	return r
}

// addRule adds rule to the running policy before its first ask rule, or
// last when it has none, retrying when another change came between
// reading the policy and adding the rule.
func (r *Registry) addRule(rule netpolicy.Rule) error {
	var err error
	for range 5 {
		snap := r.cfg.Store.Load()
		if _, _, err = r.cfg.Store.AddRule(rule, snap.Policy().FirstAsk(), snap.Version()); !errors.Is(err, netpolicy.ErrVersionMismatch) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("adding the answer's rule to the policy: %w", err)
	}
	return nil
}

// logAnswer logs the approval record of q's answer a.
func (r *Registry) logAnswer(q Approval, a Answer) {
	rec := &decisionlog.Record{
		Event: decisionlog.EventApproval, Client: q.Client, Kind: q.Kind, Method: q.Method,
		Host: q.Host, Port: int(q.Port), Path: q.Path, Rule: q.Rule, Enforced: true,
		PolicyVersion: r.cfg.Store.Load().Version(),
		ApprovalID:    q.ID, Answer: AnswerDeny, Scope: string(a.Scope), By: a.By,
		Count:  uint64(q.Waiting), // the held requests it reaches
		Action: string(netpolicy.Block),
	}
	if a.Allow {
		rec.Answer, rec.Action = AnswerAllow, string(netpolicy.Allow)
	}
	switch a.By {
	case ByTimeout:
		rec.Reason = ReasonNoAnswer + formatSeconds(q.Deadline.Sub(q.Asked))
	case ByClosed:
		rec.Reason = ReasonClosed
	default:
		rec.Reason = answerText(a)
	}
	r.cfg.Gateway.Emit(rec)
}

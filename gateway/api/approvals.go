package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/gateway/approval"
)

// The words of an answer (ApprovalAnswer.Answer).
const (
	AnswerAllow = approval.AnswerAllow
	AnswerDeny  = approval.AnswerDeny
)

// The scopes of an answer (ApprovalAnswer.Scope): how far it reaches
// (approval.Scope, docs/gateway.md).
const (
	// ScopeOnce answers the requests held now, and nothing later.
	ScopeOnce = string(approval.ScopeOnce)
	// ScopeSession also adds a rule for the question's host and port, and
	// its method and path when it has them, to the running policy, for the
	// rest of the sandbox's life.
	ScopeSession = string(approval.ScopeSession)
	// ScopeAlways also writes that rule to the run's approvals file, so
	// that later runs are not asked.
	ScopeAlways = string(approval.ScopeAlways)
)

// Who answers a question (ApprovalAnswer.By): the by field of the
// decision log's approval records. Only these answer; the gateway's own
// words for a question that no one answered (timeout, closed) are not
// answers.
const (
	ByTTY = approval.ByTTY // the prompt on sbx run's terminal
	ByCLI = approval.ByCLI // sbx approve, sbx deny
	ByAPI = approval.ByAPI // POST /v1/approvals/{id}, the default
	ByUI  = approval.ByUI  // sbx ui
)

// answerWords are the words of an answer, in the order messages list
// them.
var answerWords = []string{AnswerAllow, AnswerDeny}

// Answers returns the words of an answer: allow, deny.
func Answers() []string { return slices.Clone(answerWords) }

// Scopes returns the scopes of an answer: once, session, always.
func Scopes() []string { return approval.Scopes() }

// Answerers returns who may answer: cli, api, ui, tty.
func Answerers() []string { return approval.Answerers() }

// IsAnswer reports whether s is one of Answers.
func IsAnswer(s string) bool { return slices.Contains(answerWords, s) }

// IsScope reports whether s is one of Scopes.
func IsScope(s string) bool { return approval.IsScope(s) }

// IsAnswerer reports whether s is one of Answerers.
func IsAnswerer(s string) bool { return approval.IsAnswerer(s) }

// OrList writes words for a message, each quoted when quote is set:
// "a, b or c".
func OrList(words []string, quote bool) string {
	if quote {
		q := make([]string, len(words))
		for i, w := range words {
			q[i] = `"` + w + `"`
		}
		words = q
	}
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// Errors of answering a question, the approval package's, which the
// gateway's Gateway.AnswerApproval returns, for errors.Is.
var (
	// ErrApprovalNotFound: no pending question has the id (answered
	// already, timed out, or never asked). The API answers 404.
	ErrApprovalNotFound = approval.ErrNotFound
	// ErrNoApprovalsFile: an always answer, but the gateway has no file
	// to write rules to. The API answers 409.
	ErrNoApprovalsFile = approval.ErrNoFile
	// ErrInvalidAnswer: an answer or scope that is not one of the known
	// words. The API answers 400.
	ErrInvalidAnswer = approval.ErrInvalidAnswer
	// ErrApprovalAnswered: another answer to the question came first
	// (the error says by whom). The API answers 409.
	ErrApprovalAnswered = approval.ErrAnswered
)

// Approval is a pending question of the gateway (approval.Approval):
// GET /v1/approvals lists them.
type Approval = approval.Approval

// Approvals is the answer of GET /v1/approvals: the pending questions,
// oldest first.
type Approvals struct {
	Approvals []Approval `json:"approvals"`
}

// ApprovalAnswer is the request of POST /v1/approvals/{id}.
type ApprovalAnswer struct {
	// Answer is AnswerAllow or AnswerDeny.
	Answer string `json:"answer"`
	// By says who answers, for the decision log: one of Answerers, ByAPI
	// when empty, for the programs that answer through the API.
	By string `json:"by,omitempty"`
	// Scope is one of Scopes, ScopeOnce when empty.
	Scope string `json:"scope"`
}

// ApprovalAnswered is the answer of POST /v1/approvals/{id}: the question
// as it stood, and the answer given.
type ApprovalAnswered struct {
	Answer   string   `json:"answer"`
	Approval Approval `json:"approval"`
	By       string   `json:"by"`
	Scope    string   `json:"scope"`
}

// check checks and completes an answer: its words, and the defaults of
// By and Scope.
func (a *ApprovalAnswer) check() error {
	if !IsAnswer(a.Answer) {
		return fmt.Errorf("%w: answer %q; write %s", ErrInvalidAnswer, a.Answer, OrList(answerWords, true))
	}
	if a.Scope == "" {
		a.Scope = ScopeOnce
	}
	if !IsScope(a.Scope) {
		return fmt.Errorf("%w: scope %q; write %s", ErrInvalidAnswer, a.Scope, OrList(Scopes(), true))
	}
	if a.By == "" {
		a.By = ByAPI
	}
	if !IsAnswerer(a.By) {
		return fmt.Errorf("%w: by %q; write %s, or leave it out", ErrInvalidAnswer, a.By, OrList(Answerers(), true))
	}
	return nil
}

// errorCodes are the codes of ErrorBody, by the error they stand for: the
// two conflicts of an answer.
var errorCodes = map[error]string{
	ErrApprovalAnswered: "already_answered",
	ErrNoApprovalsFile:  "no_approvals_file",
}

// writeCodedError answers err with status, and the code of the error of
// errorCodes it wraps.
func writeCodedError(w http.ResponseWriter, status int, err error) {
	body := ErrorBody{Error: err.Error()}
	for target, code := range errorCodes {
		if errors.Is(err, target) {
			body.Code = code
		}
	}
	writeJSON(w, status, body)
}

func (a *Server) listApprovals(w http.ResponseWriter, _ *http.Request) {
	list := a.cfg.Gateway.Approvals()
	if list == nil {
		list = []Approval{}
	}
	writeJSON(w, http.StatusOK, Approvals{Approvals: list})
}

func (a *Server) answerApproval(w http.ResponseWriter, r *http.Request) {
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	var ans ApprovalAnswer
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ans); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the body is not an answer (%v); send {\"answer\": \"allow\", \"scope\": \"once\"}", err))
		return
	}
	if err := ans.check(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	q, err := a.cfg.Gateway.AnswerApproval(r.PathValue("id"), ans)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, ApprovalAnswered{Answer: ans.Answer, Approval: q, By: ans.By, Scope: ans.Scope})
	case errors.Is(err, ErrApprovalNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrApprovalAnswered), errors.Is(err, ErrNoApprovalsFile):
		writeCodedError(w, http.StatusConflict, err)
	case errors.Is(err, ErrInvalidAnswer):
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

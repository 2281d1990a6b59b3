package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Errors of answering a question, shared with the gateway that implements
// Gateway.AnswerApproval, for errors.Is.
var (
	// ErrApprovalNotFound: no pending question has the id (answered
	// already, timed out, or never asked). The API answers 404.
	ErrApprovalNotFound = errors.New("no such pending approval")
	// ErrNoApprovalsFile: an always answer, but the gateway has no file
	// to write rules to. The API answers 409.
	ErrNoApprovalsFile = errors.New("no approvals file")
	// ErrInvalidAnswer: an answer or scope that is not one of the known
	// words. The API answers 400.
	ErrInvalidAnswer = errors.New("invalid answer")
)

// Approval is a pending question of the gateway, about a request whose
// verdict is ask (docs/gateway.md): every request to Host and Port waits
// on it. Kind, Method, Path and Client are the first held request's; Rule
// and Reason the ask verdict's.
type Approval struct {
	Asked    time.Time `json:"asked"`
	Client   string    `json:"client"`
	Deadline time.Time `json:"deadline"`
	Host     string    `json:"host"`
	ID       string    `json:"id"`
	Kind     string    `json:"kind"`
	Method   string    `json:"method"`
	Path     string    `json:"path"`
	Port     uint16    `json:"port"`
	Reason   string    `json:"reason"`
	Rule     string    `json:"rule"`
	// Waiting counts the requests held on it now.
	Waiting int `json:"waiting"`
}

// Approvals is the answer of GET /v1/approvals: the pending questions,
// oldest first.
type Approvals struct {
	Approvals []Approval `json:"approvals"`
}

// ApprovalAnswer is the request of POST /v1/approvals/{id}.
type ApprovalAnswer struct {
	// Answer is "allow" or "deny".
	Answer string `json:"answer"`
	// By says who answers, for the decision log: "api" (the default),
	// "cli", "ui" or "tty", for the programs that answer through the API.
	By string `json:"by,omitempty"`
	// Scope is "once" (the default), "session" or "always".
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
	switch a.Answer {
	case "allow", "deny":
	default:
		return fmt.Errorf("%w: answer %q; write \"allow\" or \"deny\"", ErrInvalidAnswer, a.Answer)
	}
	switch a.Scope {
	case "":
		a.Scope = "once"
	case "once", "session", "always":
	default:
		return fmt.Errorf("%w: scope %q; write \"once\", \"session\" or \"always\"", ErrInvalidAnswer, a.Scope)
	}
	switch a.By {
	case "":
		a.By = "api"
	case "api", "cli", "ui", "tty":
	default:
		return fmt.Errorf("%w: by %q; write \"api\", \"cli\", \"ui\" or \"tty\", or leave it out", ErrInvalidAnswer, a.By)
	}
	return nil
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
	case errors.Is(err, ErrNoApprovalsFile):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, ErrInvalidAnswer):
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

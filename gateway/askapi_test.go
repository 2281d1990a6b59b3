package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// A held request is listed by GET /v1/approvals, shown in the follow
// stream as an approval record, and answered by POST /v1/approvals/{id}
// through the typed client; the answer is logged with by api.
func TestAskAnsweredThroughTheAPI(t *testing.T) {
	up := echoUpstream(t)
	port := uint16(portOf(t, up))
	spec := loopbackPolicy(netpolicy.Ask)
	spec.AskTimeout = netpolicy.Duration(time.Minute)
	a := startAPIWith(t, spec, map[string]string{"api.test": "127.0.0.1"}, nil)
	c := apiClientOf(t, a, a.token)
	ctx := context.Background()
	stream, err := c.FollowDecisions(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()

	held := getAsync(a.proxy, fmt.Sprintf("http://api.test:%d/", port))
	var q api.Approval
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		list, err := c.Approvals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Approvals) == 1 {
			q = list.Approvals[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/approvals: got %+v, want one question", list)
		}
	}
	if q.Host != "api.test" || q.Port != port || q.Waiting != 1 || q.Rule != "default" || !q.Deadline.After(q.Asked) {
		t.Errorf("the listed question: got %+v", q)
	}
	// The follow stream carries the question.
	for {
		line, err := stream.Next()
		if err != nil {
			t.Fatalf("the follow stream: %v", err)
		}
		var rec decisionlog.Record
		if err := decisionlog.Decode(line, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Event == decisionlog.EventApproval {
			if rec.ApprovalID != q.ID || rec.Host != "api.test" || rec.Action != "ask" {
				t.Errorf("the streamed question: got %s", line)
			}
			break
		}
	}
	_, err = c.AnswerApproval(ctx, q.ID, api.ApprovalAnswer{Answer: "allow", Scope: "always"})
	wantAPIError(t, "an always answer without a file", err, http.StatusConflict, "approvals file")
	_, err = c.AnswerApproval(ctx, q.ID, api.ApprovalAnswer{Answer: "yes"})
	wantAPIError(t, "a bad answer", err, http.StatusBadRequest, `write "allow" or "deny"`)
	got, err := c.AnswerApproval(ctx, q.ID, api.ApprovalAnswer{Answer: "allow", Scope: "once"})
	if err != nil {
		t.Fatalf("AnswerApproval: %v", err)
	}
	if got.Approval.ID != q.ID || got.Answer != "allow" || got.Scope != "once" || got.By != "api" {
		t.Errorf("the answer's answer: got %+v", got)
	}
	if r := result(t, held); r.status != 200 {
		t.Errorf("the held request: got %d %s, want 200", r.status, r.body)
	}
	_, err = c.AnswerApproval(ctx, q.ID, api.ApprovalAnswer{Answer: "deny"})
	wantAPIError(t, "answering again", err, http.StatusNotFound, "no such pending approval")
	// The stream then carries the answer, by api.
	for {
		line, err := stream.Next()
		if err != nil {
			t.Fatalf("the follow stream: %v", err)
		}
		var rec map[string]any
		json.Unmarshal(line, &rec)
		if rec["event"] == decisionlog.EventApproval && rec["answer"] != nil {
			if rec["answer"] != "allow" || rec["by"] != "api" || rec["scope"] != "once" || !strings.Contains(rec["reason"].(string), "allowed once by api") {
				t.Errorf("the streamed answer: got %s", line)
			}
			break
		}
	}
}

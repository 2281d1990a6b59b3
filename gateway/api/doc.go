// Package api is the management API (docs/api.md): its wire, the requests
// and answers of every endpoint and the error body; Client, a typed
// client of every endpoint; and Server, the API itself, which package
// gateway serves.
//
// The JSON of the wire types is a contract: field names and shapes do not
// change. A mock's journal entry is MockRequest here, the same fields as
// mockllm.Journaled.
//
// The server acts on a Gateway, an interface this package declares and
// package gateway implements over its proxy: the policy store, the
// counters, the metrics and the mock LLMs, the questions and their
// answers. So the package imports netpolicy (a policy is a
// netpolicy.Spec, a rule a netpolicy.Rule), the approvals (a question is
// an approval.Approval, which Approval names), the decision log (whose
// ring /v1/decisions serves) and the mock LLM (whose scripts
// /v1/mock/expect decodes), and never the gateway: any program can talk
// to a gateway without linking one.
package api

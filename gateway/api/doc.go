// Package api is the management API's wire (docs/api.md): the requests
// and answers that the gateway's API encodes and its clients decode, the
// error body, and Client, a typed client of every endpoint.
//
// The JSON of these types is a contract: field names and shapes do not
// change. The package imports netpolicy (a policy is a netpolicy.Spec, a
// rule a netpolicy.Rule) and nothing else of sbx, so that any program can
// talk to a gateway without linking one; a mock's journal entry is
// MockRequest here, the same fields as mockllm.Journaled.
package api

// Package approval holds the requests whose verdict is ask until a person
// answers (docs/gateway.md, "Ask: held requests and their answers"): the
// questions, the answers, the rules answers add, and the approvals file
// always answers write.
//
// A Registry keeps one question per host, port, method and path (a
// tunnel's question has no method or path): requests that show the same
// join it, and its answer releases those and no other. Ask asks a
// question, or joins one, and logs a new one; it first lets the gateway
// guard a name whose addresses it knows without a lookup (Gateway.Guard),
// so that what the address guard refuses is refused, never asked about;
// other names reach no resolver before the answer. Held.Wait parks the
// request's goroutine on the question's channel until the answer, the
// timeout (the policy's ask_timeout) or the request's end: a held request
// costs no CPU. Every held request counts toward Config.Max, HTTP/2
// streams of one connection included; past it a request is blocked, not
// asked. Answer carries out an answer once: a second answer meanwhile is
// refused (ErrAnswered); once answers the held requests only, session
// also adds a rule no wider than the question to the running policy,
// always also writes that rule to the approvals file. Every question and
// every answer, timeouts and Close's included, is logged as an approval
// record through Gateway.Emit before the requests it reaches wake.
//
// AddApprovedRule writes a rule to an approvals file (a YAML policy
// file), keeping its rules and comments: it reads at most MaxFileSize,
// refuses a file another user owns or others may write, takes flock on
// ".NAME.lock" beside it (which every sbx process takes), and replaces it
// atomically. PinFile opens the file's directory once, before anything
// untrusted runs; AddApprovedRule then reads and writes through it, and
// never through a symbolic link.
//
// The package defines the types of a question and an answer (Approval,
// Answer, Scope, the answerers, the errors), which the management API
// serves as they are. It does not hold connections: the gateway watches
// a held request's client (its hanging up ends the ctx given to Wait)
// and renews its deadlines. It does not decide verdicts (netpolicy), nor
// resolve or guard addresses (the gateway, through Gateway), nor refuse
// at the start an approvals file the sandbox can write (sandbox/run).
package approval

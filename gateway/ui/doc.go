// Package ui is sbx ui: one local web view of every sandbox of the host,
// over the management API the CLI uses (gateway/api) and, for sandboxes
// that ended, their decision logs read by gateway/audit. It never runs a
// gateway and never imports one: where the sandboxes are, how to talk to
// each one's API and how to open its log come from a Sandboxes that the
// caller (cmd/sbx) implements.
//
// The server listens on 127.0.0.1 only, and holds [::1] at the same port
// so that no other program can (a browser sent to localhost may try it
// first). Every request must name it by its Host header as
// 127.0.0.1:PORT (a page of another site that rebinds its name to
// 127.0.0.1 is refused, and so is localhost), and must carry the session
// cookie that opening the printed URL, with its random token, sets
// (HttpOnly, SameSite=Strict); the token then leaves the address bar by
// a redirect and is spent: it makes one session only. A session ends
// after SessionIdle without a request, and on Linux it is bound to the
// uid whose program exchanged the token (the owner of the connection's
// other end, from /proc/net/tcp), so that another user's program with
// the cookie (a browser sends it to every port of 127.0.0.1) is
// refused. Every request that changes something is a POST that must
// come from the view's own pages in a browser: Sec-Fetch-Site must say
// same-origin, or Origin be exactly the view's (a POST with neither, as
// curl sends it, is refused), and the form must hold the session's CSRF
// token. An answer is to the question its form names, and only once
// that question has been asked for AnswerDelay.
//
// Pages are rendered on the server by html/template, so every string of
// a sandbox (host names, decision reasons, commands, rule ids) is
// written as escaped text. Every answer has a Content-Security-Policy
// that loads nothing but the view's own style sheet and script
// (default-src 'none'); the script only makes the live decisions appear
// and the pending approvals come and go as they happen (server-sent
// events from the API's follow stream), and without it the sandbox's
// page refreshes itself. Answers to approvals are POSTs like any other
// change, sent to the API by "ui".
package ui

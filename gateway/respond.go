package gateway

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The headers the gateway adds to what it answers itself (docs/gateway.md).
const (
	HeaderDecision = "X-Sbx-Decision"
	HeaderRule     = "X-Sbx-Rule"
	HeaderReason   = "X-Sbx-Reason"
)

// writeSimple writes a complete response the gateway makes itself. extra
// headers come after the framing headers; close adds Connection: close.
func writeSimple(w io.Writer, status int, contentType, body string, close bool, extra [][2]string) error {
	return writeAnswer(w, "", status, contentType, body, close, extra)
}

// writeAnswer is writeSimple for a request of method: the answer to HEAD
// is the head alone, its Content-Length the body's (RFC 9110 §9.3.2), so
// that a kept connection's next answer is read where it starts.
func writeAnswer(w io.Writer, method string, status int, contentType, body string, close bool, extra [][2]string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	if contentType == "" {
		contentType = "text/plain; charset=utf-8"
	}
	if status != http.StatusNoContent && status != http.StatusNotModified {
		fmt.Fprintf(&b, "Content-Type: %s\r\nContent-Length: %d\r\n", headerSafe(contentType), len(body))
	} else {
		body = ""
	}
	if close {
		b.WriteString("Connection: close\r\n")
	}
	for _, h := range extra {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], headerSafe(h[1]))
	}
	b.WriteString("\r\n")
	if method != http.MethodHead {
		b.WriteString(body)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// headerSafe replaces what may not stand in a header value.
func headerSafe(v string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' && r != '\t' || r == 0x7f {
			return '?'
		}
		return r
	}, v)
}

// blockHeaders are the X-Sbx headers of a 403.
func blockHeaders(d netpolicy.Decision) [][2]string {
	return [][2]string{
		{HeaderDecision, string(netpolicy.Block)},
		{HeaderRule, d.Rule},
		{HeaderReason, d.Reason},
	}
}

// blockText is the body of a 403: what was blocked (the request, as
// describe writes it) and how to allow it.
func (p *pipeline) blockText(what, hostport string, d netpolicy.Decision) string {
	s := p.s
	var b strings.Builder
	fmt.Fprintf(&b, "sbx blocked %s\n  rule:   %s\n  reason: %s\n\n", what, d.Rule, d.Reason)
	switch d.Rule {
	case netpolicy.RuleInvalid:
		b.WriteString("The request's target cannot be used; no rule can allow it.\n")
	case netpolicy.RuleGuard:
		if strings.HasPrefix(d.Reason, decisionlog.ReasonLogFault) {
			b.WriteString("The decision log cannot record it, and sbx carries out nothing it has not\n" +
				"recorded; the reason says how to fix the log.\n")
			break
		}
		if isFenced(d.Reason) {
			b.WriteString("No policy reaches this address: the gateway never connects to this host\n" +
				"itself or to a sandbox, whatever allow_private or an IP rule says.\n")
			break
		}
		b.WriteString("The address is private or special. To reach it, exempt its range from the\n" +
			"address guard in the policy (allow_private: [CIDR], or --allow-private CIDR),\n" +
			"or allow it by an IP or CIDR rule.\n")
	default:
		command := "sbx policy allow --sandbox " + s.cfg.Sandbox
		switch {
		case s.cfg.AllowCommand != "":
			command = s.cfg.AllowCommand
		case s.cfg.Sandbox == "":
			command = "sbx policy allow --api ADDR --token-file FILE"
		}
		fmt.Fprintf(&b, "To allow it while this runs:\n  %s %s\n"+
			"or add an allow rule for it to the policy.\n", command, hostport)
	}
	return b.String()
}

// interceptHead is an intercept rule's status, content type and other
// headers, the X-Sbx ones first, in a stable order.
func interceptHead(d netpolicy.Decision) (status int, contentType string, extra [][2]string) {
	r := d.Response
	status = interceptStatus(d)
	extra = [][2]string{{HeaderDecision, string(netpolicy.Intercept)}, {HeaderRule, d.Rule}}
	names := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if strings.EqualFold(k, "Content-Type") {
			contentType = r.Headers[k]
			continue
		}
		extra = append(extra, [2]string{http.CanonicalHeaderKey(k), r.Headers[k]})
	}
	return status, contentType, extra
}

// describe renders a request for messages: "GET http://host:80/path" or
// "CONNECT host:443".
func describe(method, hostport, path string) string {
	if method == http.MethodConnect {
		return "CONNECT " + hostport
	}
	return method + " http://" + hostport + path
}

// joinHostPort is net.JoinHostPort for a normalized host and a port.
func joinHostPort(host string, port uint16) string {
	if strings.IndexByte(host, ':') >= 0 {
		return "[" + host + "]:" + strconv.Itoa(int(port))
	}
	return host + ":" + strconv.Itoa(int(port))
}

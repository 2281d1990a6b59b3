package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Request names a request as a person writes it, to ask what the gateway
// would decide for it (Policy.Check, sbx policy check). The zero Method
// and Path are documented with each field.
type Request struct {
	// URL is what to reach: an http://, https://, ws:// or wss:// URL
	// (the scheme in any case) or host[:port], where an IPv6 address
	// takes brackets when a port follows. An http:// or ws:// URL is a
	// plain HTTP request to port 80 by default; an https:// or wss:// URL
	// a CONNECT tunnel to port 443 by default, with a request inside it;
	// host[:port] a CONNECT tunnel to port 443 by default. A URL's
	// fragment is dropped, as clients drop it.
	URL string
	// Method is the request's method, a token (ValidMethod). "" means the
	// tunnel alone for host[:port], and GET otherwise. CONNECT asks for
	// the tunnel to the URL's host and port, even of an http:// URL.
	// Another method makes host[:port] a plain HTTP request (to port 80
	// by default), and is the method of the request in an https:// URL's
	// tunnel.
	Method string
	// Path is the request's path, "" for the URL's (or "/"). Set, it
	// starts with '/' and goes with no URL path but "/"; like Method it
	// makes host[:port] a plain HTTP request. Its query and fragment are
	// dropped. It cannot go with Method CONNECT.
	Path string
}

// ErrTwoPaths is returned by Policy.Check for a Request with both a Path
// and a URL with a path.
var ErrTwoPaths = errors.New("the URL has a path and a path is given")

// Checked is what the gateway would decide for a Request.
type Checked struct {
	// Target is the request decided: the tunnel (Method CONNECT), a plain
	// HTTP request, or the request in the tunnel of an https:// URL whose
	// host the policy inspects. Host is as written; Decide normalizes it.
	Target Target
	// Decision is the verdict (Policy.Verdict), for a tunnel the policy
	// inspects DecideTunnel's, or the verdict on the request in it when
	// the tunnel opens.
	Decision Decision
	// Inspected says that the policy inspects the tunnel's host and port
	// (Policy.Inspects): the gateway decrypts the tunnel and decides each
	// request in it.
	Inspected bool
	// Refused is the request-target when the gateway refuses it before
	// deciding (ParseConnectTarget or ParseProxyTarget), with any
	// password in it hidden: Decision is then the block by RuleInvalid
	// the gateway logs, its reason the parser's, and Target holds the
	// method alone. It is "" otherwise.
	Refused string
}

// Check is what the gateway would decide for r: the request a client
// sends the gateway for r (RequestLine) is parsed with the gateway's
// parser, so that a target the gateway refuses is a block by RuleInvalid
// here too, and decided as the gateway decides it, tunnels the policy
// inspects included. Like Verdict it ignores the mode and does no DNS.
//
// The error says why r names no request: an empty URL, an unsupported
// scheme, a path given to host[:port] (write a URL), Path with a URL's
// path (ErrTwoPaths), or a bad Method or Path.
func (p *Policy) Check(r Request) (Checked, error) {
	line, err := r.requestLine()
	if err != nil {
		return Checked{}, err
	}
	if line.method != "CONNECT" {
		u, err := ParseProxyTarget(line.target)
		if err != nil {
			return refused(line, err), nil
		}
		t := Target{Host: u.Hostname(), Port: 80, Method: line.method, Path: u.EscapedPath()}
		if port := u.Port(); port != "" {
			t.Port, _ = parseTargetPort(port) // ParseProxyTarget checked it
		}
		if t.Path == "" {
			t.Path = "/"
		}
		return Checked{Target: t, Decision: p.Verdict(t)}, nil
	}
	host, port, err := ParseConnectTarget(line.target)
	if err != nil {
		return refused(line, err), nil
	}
	t := Target{Host: host, Port: port, Method: "CONNECT"}
	c := Checked{Target: t, Decision: p.Verdict(t), Inspected: p.Inspects(host, port)}
	if !c.Inspected {
		return c, nil // the gateway sees the tunnel alone
	}
	// The gateway decrypts this host's tunnels (docs/inspection.md): the
	// tunnel opens unless no request could pass, and the request in it
	// is decided on its own.
	c.Decision = p.DecideTunnel(t)
	if line.innerMethod != "" && c.Decision.Action != Block {
		c.Target = Target{Host: host, Port: port, Method: line.innerMethod, Path: line.innerPath}
		c.Decision = p.Verdict(c.Target)
	}
	return c, nil
}

// refused is the Checked of a request whose target the gateway refuses
// with err, a *TargetError.
func refused(line requestLine, err error) Checked {
	return Checked{
		Target:   Target{Method: line.method},
		Decision: invalidDecision(err.Error()),
		Refused:  hidePassword(line.target),
	}
}

// RequestLine returns the request line a client sends the gateway for r:
// its method, and its request-target as the client writes it (host:port
// for CONNECT, an absolute http:// URL otherwise), which the gateway may
// still refuse. The error is Check's.
func (r Request) RequestLine() (method, target string, err error) {
	line, err := r.requestLine()
	return line.method, line.target, err
}

// requestLine is what a client sends the gateway for a Request: the
// request line, and the request in the tunnel of an https:// URL.
type requestLine struct {
	method, target         string
	innerMethod, innerPath string // "" when there is none
}

func (r Request) requestLine() (requestLine, error) {
	method, path, err := r.methodPath()
	if err != nil {
		return requestLine{}, err
	}
	if r.URL == "" {
		return requestLine{}, errors.New("empty target; write host[:port] or a URL such as https://example.com/")
	}
	scheme, rest, isURL := strings.Cut(r.URL, "://")
	if !isURL {
		return hostLine(r.URL, method, path)
	}
	rest, _, _ = strings.Cut(rest, "#") // the fragment stays with the client
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, pathQuery := rest[:end], rest[end:]
	urlPath, _, _ := strings.Cut(pathQuery, "?")
	if path != "" && urlPath != "" && urlPath != "/" {
		return requestLine{}, fmt.Errorf("%w (%s); give one of them", ErrTwoPaths, path)
	}
	switch strings.ToLower(scheme) {
	case "http", "ws":
		if method == "CONNECT" {
			return requestLine{method: method, target: withPort(authority, "80")}, nil
		}
		if path != "" {
			pathQuery = path
		}
		return requestLine{method: orGET(method), target: "http://" + authority + pathQuery}, nil
	case "https", "wss":
		line := requestLine{method: "CONNECT", target: withPort(authority, "443")}
		if method != "CONNECT" {
			line.innerMethod, line.innerPath = orGET(method), path
			if path == "" {
				line.innerPath = urlPath
			}
			if line.innerPath == "" {
				line.innerPath = "/"
			}
		}
		return line, nil
	}
	return requestLine{}, fmt.Errorf("scheme %q is not supported; use http://, https://, ws:// or wss://, or write host[:port]", strings.ToLower(scheme))
}

// methodPath checks r's Method and Path, and returns the method in upper
// case and the path without its query.
func (r Request) methodPath() (method, path string, err error) {
	if r.Method != "" && !ValidMethod(r.Method) {
		return "", "", fmt.Errorf("method %q is not an HTTP method; write e.g. POST", r.Method)
	}
	method = strings.ToUpper(r.Method)
	if r.Path == "" {
		return method, "", nil
	}
	if r.Path[0] != '/' {
		return "", "", fmt.Errorf("path %q must start with '/', e.g. /v1/", r.Path)
	}
	if method == "CONNECT" {
		return "", "", errors.New("a path cannot go with method CONNECT: a tunnel has no path")
	}
	path, _, _ = strings.Cut(r.Path, "#")
	path, _, _ = strings.Cut(path, "?")
	return method, path, nil
}

// hostLine is the request line for host[:port]: a CONNECT to port 443 by
// default, or, with a method other than CONNECT or a path, a plain HTTP
// request to port 80 by default. A bare IPv6 address is put in brackets.
func hostLine(arg, method, path string) (requestLine, error) {
	if strings.ContainsAny(arg, "/?#") {
		return requestLine{}, fmt.Errorf("neither host[:port] nor a URL; for a path write a URL such as http://%s", strings.TrimLeft(arg, "/"))
	}
	if ip, err := netip.ParseAddr(arg); err == nil && ip.Is6() {
		arg = "[" + arg + "]"
	}
	if path == "" && (method == "" || method == "CONNECT") {
		return requestLine{method: "CONNECT", target: withPort(arg, "443")}, nil
	}
	if path == "" {
		path = "/"
	}
	return requestLine{method: orGET(method), target: "http://" + arg + path}, nil
}

// withPort returns authority with ":"+port added when it has no port:
// nothing after its IPv6 address's ']', or no ':' after its userinfo.
// What it cannot tell is left to the gateway's parser to judge.
func withPort(authority, port string) string {
	hostport := authority[strings.LastIndexByte(authority, '@')+1:]
	if i := strings.LastIndexByte(hostport, ']'); i >= 0 {
		if i+1 < len(hostport) {
			return authority
		}
	} else if strings.IndexByte(hostport, ':') >= 0 {
		return authority
	}
	return authority + ":" + port
}

func orGET(method string) string {
	if method == "" {
		return "GET"
	}
	return method
}

// hidePassword replaces the password of a target's userinfo with xxxxx.
func hidePassword(target string) string {
	prefix, rest := "", target
	if i := strings.Index(target, "://"); i >= 0 {
		prefix, rest = target[:i+3], target[i+3:]
	}
	at := strings.LastIndexByte(rest, '@')
	if end := strings.IndexAny(rest, "/?"); end >= 0 && end < at {
		at = strings.LastIndexByte(rest[:end], '@')
	}
	if at < 0 {
		return target
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return target
	}
	return prefix + user + ":xxxxx" + rest[at:]
}

// Package secrets keeps secrets out of the sandbox (docs/secrets.md): the
// sandbox holds a placeholder, and the gateway puts the value in its
// place only where this package lets it go.
//
// A Secret is one binding, NAME@HOST[:PORT]: a name, a value (read from
// a variable or a file with Read, or given to New or FromSpec), the
// hosts and ports it is sent to, the credential header fields it goes in
// (Authorization or x-api-key unless the binding names others), the
// methods and paths it goes with, and a placeholder of its own
// (PlaceholderPrefix, the name and 128 random bits). Printing a Secret
// shows its name, never its value.
//
// A Set is the secrets of one gateway and the rules of where a value may
// go. A value goes only in one field line of one of its secret's
// credential header fields, holding the placeholder alone or after an
// authentication scheme, of an HTTPS request to one of its hosts, inside
// a tunnel whose upstream certificate the gateway verified, with a
// method and path of the binding's (a path compared as an allow rule's
// is: after escapes and dot segments, with and without ';' parameters).
// Set.BlockLeak turns the decision of a request that carries a
// placeholder anywhere else (the headers, path, query or method of a
// request to another host; another header, a second field line, other
// text beside it, plain HTTP, or a method or path outside the binding on
// a request to its host) into a block by Rule, enforced in every mode;
// Set.PlaceholderIn finds one in a host, a CONNECT target, a TLS server
// name or a DNS name; a TrailerGuard in a request's trailers.
//
// Set.Inject and Set.WithValues are the one place a value is written.
// Set.Redact takes the values out of the text of an upstream's error.
// Set.ScrubberFor is the scrubber (gateway/secretscrub) of what a bound
// host answers; ScrubResponse, Scrubbing and DecodedBody put it to an
// http.Response: its header fields, trailers and body, decoded from the
// content codings the gateway can decode (ContentCodings; any other is
// refused). NoteFound names the secrets replaced in a close record.
//
// The package does not parse requests, dial, inspect TLS or write
// answers: the gateway does, and asks the Set at each step (the raw
// HTTP/1 answer and the WebSocket frames of the proxy are scrubbed by
// the gateway's writers, with the Set's scrubber). The streaming
// scrubber itself is gateway/secretscrub, which knows values and
// placeholders only; the bindings' syntax (netpolicy.Secret,
// netpolicy.SecretScope) is netpolicy's.
package secrets

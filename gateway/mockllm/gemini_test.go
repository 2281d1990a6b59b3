package mockllm

import (
	"regexp"
	"strings"
	"testing"
)

// responseIDs are the random responseIds of Gemini answers, replaced for
// comparing.
var responseIDs = regexp.MustCompile(`"responseId":"[^"]*"`)

func stableIDs(s string) string {
	return responseIDs.ReplaceAllString(s, `"responseId":"ID"`)
}

// TestGeminiWire checks each endpoint of the Gemini API the mock answers
// against the exact body Google's API sends for it, the API key given
// either way Google's clients give it.
func TestGeminiWire(t *testing.T) {
	script := `turns:
  - match: {model: gemini-2.5-pro, user: "say hello"}
    reply: {text: "Hello.", usage: {input_tokens: 10, output_tokens: 2}}
    times: unlimited
  - match: {tool_result: run_shell_command}
    reply: {text: "Two files.", stop_reason: max_tokens, usage: {input_tokens: 30, output_tokens: 3}}
  - match: {model: gemini-2.5-pro, user: "list"}
    reply:
      text: "Listing."
      tool_calls: [{name: run_shell_command, input: {command: ls}}]
      usage: {input_tokens: 20, output_tokens: 8}
      chunk_size: 4
    times: unlimited
`
	hello := `{"contents":[{"role":"user","parts":[{"text":"say hello"}]}]}`
	list := `{"contents":[{"role":"user","parts":[{"text":"list"}]}],"tools":[{"functionDeclarations":[{"name":"run_shell_command"}]}]}`
	result := `{"contents":[{"role":"user","parts":[{"text":"list"}]},` +
		`{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}}}]},` +
		`{"role":"user","parts":[{"functionResponse":{"name":"run_shell_command","response":{"output":"a b"}}}]}]}`
	tests := []struct {
		name, method, path, body string
		header                   []string
		wantStatus               int
		wantType                 string
		want                     string
	}{
		{
			name: "generateContent", method: "POST", path: "/v1beta/models/gemini-2.5-pro:generateContent", body: hello,
			header:     []string{"x-goog-api-key", "k"},
			wantStatus: 200, wantType: contentJSON,
			want: `{"candidates":[{"content":{"parts":[{"text":"Hello."}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":2,"totalTokenCount":12},"modelVersion":"gemini-2.5-pro","responseId":"ID"}`,
		},
		{
			name: "a function call", method: "POST", path: "/v1beta/models/gemini-2.5-pro:generateContent?key=k", body: list,
			wantStatus: 200, wantType: contentJSON,
			want: `{"candidates":[{"content":{"parts":[{"text":"Listing."},{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}}}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":8,"totalTokenCount":28},"modelVersion":"gemini-2.5-pro","responseId":"ID"}`,
		},
		{
			// SSE as Google frames it: a data line, CRLF CRLF; the text in
			// chunks, the call whole in the last chunk with the finish
			// reason and the full usage.
			name: "streamGenerateContent", method: "POST", path: "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", body: list,
			header:     []string{"x-goog-api-key", "k"},
			wantStatus: 200, wantType: contentSSE,
			want: `data: {"candidates":[{"content":{"parts":[{"text":"List"}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":20,"totalTokenCount":20},"modelVersion":"gemini-2.5-pro","responseId":"ID"}` + "\r\n\r\n" +
				`data: {"candidates":[{"content":{"parts":[{"text":"ing."}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":20,"totalTokenCount":20},"modelVersion":"gemini-2.5-pro","responseId":"ID"}` + "\r\n\r\n" +
				`data: {"candidates":[{"content":{"parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}}}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":8,"totalTokenCount":28},"modelVersion":"gemini-2.5-pro","responseId":"ID"}` + "\r\n\r\n",
		},
		{
			// The function's response comes back in the next request: the
			// turn matched by tool_result answers it.
			name: "a function response", method: "POST", path: "/v1/models/gemini-2.5-pro:generateContent", body: result,
			wantStatus: 200, wantType: contentJSON,
			want: `{"candidates":[{"content":{"parts":[{"text":"Two files."}],"role":"model"},"finishReason":"MAX_TOKENS","index":0}],"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":3,"totalTokenCount":33},"modelVersion":"gemini-2.5-pro","responseId":"ID"}`,
		},
		{
			// A token per four bytes of the body, as a reply's estimated usage.
			name: "countTokens", method: "POST", path: "/v1beta/models/gemini-2.5-pro:countTokens", body: `{"contents":[{"role":"user","parts":[{"text":"0123456789abcdef"}]}]}`,
			wantStatus: 200, wantType: contentJSON,
			want: `{"totalTokens":17,"promptTokensDetails":[{"modality":"TEXT","tokenCount":17}]}`,
		},
		{
			name: "models", method: "GET", path: "/v1beta/models", header: []string{"x-goog-api-key", "k"},
			wantStatus: 200, wantType: contentJSON,
			want: `{"models":[{"name":"models/gemini-2.5-pro","version":"001","displayName":"gemini-2.5-pro","description":"A model of the sbx mock LLM, answered from its script.","inputTokenLimit":1048576,"outputTokenLimit":65536,"supportedGenerationMethods":["generateContent","countTokens"]}]}`,
		},
		{
			name: "models under v1 with Google's key", method: "GET", path: "/v1/models?key=k",
			wantStatus: 200, wantType: contentJSON,
			want: `{"models":[{"name":"models/gemini-2.5-pro","version":"001","displayName":"gemini-2.5-pro","description":"A model of the sbx mock LLM, answered from its script.","inputTokenLimit":1048576,"outputTokenLimit":65536,"supportedGenerationMethods":["generateContent","countTokens"]}]}`,
		},
		{
			name: "a model", method: "GET", path: "/v1beta/models/gemini-2.5-flash",
			wantStatus: 200, wantType: contentJSON,
			want: `{"name":"models/gemini-2.5-flash","version":"001","displayName":"gemini-2.5-flash","description":"A model of the sbx mock LLM, answered from its script.","inputTokenLimit":1048576,"outputTokenLimit":65536,"supportedGenerationMethods":["generateContent","countTokens"]}`,
		},
		{
			name: "no turn fits", method: "POST", path: "/v1beta/models/gemini-2.5-flash:generateContent", body: hello,
			wantStatus: 400, wantType: contentJSON,
			want: `{"error":{"code":400,"message":"sbx mock LLM: no turn fits this request (model \"gemini-2.5-flash\", last user message \"say hello\"); the first turn left, turn 1 (TestGeminiWire.yaml:2), wants model \"gemini-2.5-pro\"; add a turn to the script or queue one","status":"INVALID_ARGUMENT"}}`,
		},
		{
			name: "not JSON", method: "POST", path: "/v1beta/models/gemini-2.5-pro:generateContent", body: "{",
			wantStatus: 400, wantType: contentJSON,
			want: `{"error":{"code":400,"message":"sbx mock LLM: the request body is not valid JSON: unexpected end of JSON input","status":"INVALID_ARGUMENT"}}`,
		},
		{
			name: "a method the mock does not answer", method: "POST", path: "/v1beta/models/text-embedding-004:embedContent", body: `{}`,
			wantStatus: 404, wantType: contentJSON,
			want: `{"error":{"code":404,"message":"sbx mock LLM: no API at POST /v1beta/models/text-embedding-004:embedContent; the mock answers POST /v1/messages, /v1/chat/completions, /v1/responses and /v1beta/models/MODEL:generateContent","status":"NOT_FOUND"}}`,
		},
	}
	_, srv := serve(t, script)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, got, err := post(t, srv, tt.method, tt.path, tt.body, tt.header...)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("got status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if ct := resp.Header.Get("Content-Type"); ct != tt.wantType {
				t.Errorf("got Content-Type %q, want %q", ct, tt.wantType)
			}
			if got := stableIDs(got); got != tt.want {
				t.Errorf("got body\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestGeminiFunctionRoundTrip: a call with an id (as the Vertex API and
// some clients give) is answered by the functionResponse with that id,
// and the journal says which turn answered.
func TestGeminiFunctionRoundTrip(t *testing.T) {
	r, srv := serve(t, `turns:
  - reply: {tool_calls: [{id: call-7, name: read_file, input: {path: a.txt}}]}
  - match: {tool_result: read_file}
    reply: {text: "read"}
`)
	_, got, err := post(t, srv, "POST", "/v1beta/models/m:generateContent", `{"contents":[{"role":"user","parts":[{"text":"read a.txt"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"functionCall":{"id":"call-7","name":"read_file","args":{"path":"a.txt"}}}`; !strings.Contains(got, want) {
		t.Fatalf("got %s, want a part %s", got, want)
	}
	// The next request carries only the function's response, by id and
	// name; an earlier content repeats nothing of the call.
	_, got, err = post(t, srv, "POST", "/v1beta/models/m:generateContent", `{"contents":[{"role":"user","parts":[{"functionResponse":{"id":"call-7","name":"read_file","response":{"content":"x"}}}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, `"text":"read"`) {
		t.Errorf("got %s, want the tool_result turn's text", got)
	}
	j := r.Requests()
	if len(j) != 2 || j[1].Turn != 2 || j[1].Dialect != Gemini || j[1].Model != "m" {
		t.Errorf("got journal %+v, want the second request answered by turn 2, dialect gemini, model m", j)
	}
}

// TestGeminiFaults: a scripted error is in Google's shape with its
// headers, and a stream cut after an event leaves a whole first chunk.
func TestGeminiFaults(t *testing.T) {
	_, srv := serve(t, `turns:
  - fault: {status: 429, headers: {retry-after: "3"}}
  - fault: {status: 503}
  - fault: {disconnect_after_events: 1}
`)
	body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	for _, want := range []struct {
		status      int
		body, retry string
	}{
		{429, `{"error":{"code":429,"message":"sbx mock LLM: scripted fault: 429 Too Many Requests","status":"RESOURCE_EXHAUSTED"}}`, "3"},
		{503, `{"error":{"code":503,"message":"sbx mock LLM: scripted fault: 503 Service Unavailable","status":"UNAVAILABLE"}}`, ""},
	} {
		resp, got, err := post(t, srv, "POST", "/v1beta/models/m:generateContent", body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want.status || got != want.body || resp.Header.Get("retry-after") != want.retry {
			t.Errorf("got %d %s (retry-after %q), want %d %s (retry-after %q)", resp.StatusCode, got, resp.Header.Get("retry-after"), want.status, want.body, want.retry)
		}
	}
	_, got, err := post(t, srv, "POST", "/v1beta/models/m:streamGenerateContent?alt=sse", body)
	if err == nil {
		t.Fatalf("got a whole stream %q, want it cut", got)
	}
	if events := splitEvents([]byte(got)); len(events) != 1 || !strings.HasPrefix(events[0], `data: {"candidates":[{"content":{"parts":[{"text":"sbx mock LLM: th"}]`) || !strings.HasSuffix(events[0], "\r\n\r\n") {
		t.Errorf("got %q before the cut, want one whole chunk of the stand-in text", got)
	}
}

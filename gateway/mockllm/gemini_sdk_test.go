package mockllm_test

// The Gemini API as Google's Gen AI SDK for JavaScript (@google/genai, which
// the Gemini CLI uses) speaks it: there is no Go SDK among this module's
// dependencies, so geminiClient sends what the SDK sends (its headers, and
// request bodies the Gemini CLI 0.61.0 sent, in testdata, trimmed) and
// reads the answer as the SDK does (its SSE line pattern, its error).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// geminiLine is the SDK's pattern for an event of a stream
// (responseLineRE of @google/genai 1.30.0, as the Gemini CLI 0.61.0
// bundles it).
var geminiLine = regexp.MustCompile(`^\s*data: (.*)(?:\n\n|\r\r|\r\n\r\n)`)

// geminiAnswer is what the SDK makes of a GenerateContentResponse: the
// text of the first candidate's parts (its .text), its function calls
// (.functionCalls) and the last finish reason and usage.
type geminiAnswer struct {
	text         string
	calls        []string // name and args
	finishReason string
	usage        map[string]int
}

// geminiError is the SDK's ApiError: the status and the error's message.
type geminiError struct {
	status  int
	message string
	code    string
}

func (e *geminiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

// geminiClient sends body to model's method as the SDK does and reads the
// answer as it does.
func geminiClient(t *testing.T, url, model, method string, body []byte) (*geminiAnswer, error) {
	t.Helper()
	path := url + "/v1beta/models/" + model + ":" + method
	if method == "streamGenerateContent" {
		path += "?alt=sse"
	}
	req, err := http.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-goog-api-key", "mock")
	req.Header.Set("x-goog-api-client", "google-genai-sdk/1.30.0 gl-node/v20.20.2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
				Status  string `json:"status"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &e); err != nil || e.Error.Code != resp.StatusCode {
			t.Fatalf("an error the SDK cannot read (%v): %s", err, data)
		}
		return nil, &geminiError{resp.StatusCode, e.Error.Message, e.Error.Status}
	}
	a := &geminiAnswer{}
	if method != "streamGenerateContent" {
		a.add(t, data)
		return a, nil
	}
	buf := string(data)
	for {
		m := geminiLine.FindStringSubmatchIndex(buf)
		if m == nil {
			break
		}
		a.add(t, []byte(buf[m[2]:m[3]]))
		buf = buf[m[1]:]
	}
	if buf != "" {
		t.Errorf("the stream ends in %q, which the SDK's pattern leaves unread", buf)
	}
	return a, nil
}

func (a *geminiAnswer) add(t *testing.T, data []byte) {
	t.Helper()
	var r struct {
		Candidates []struct {
			Content struct {
				Role  string `json:"role"`
				Parts []struct {
					Text         *string `json:"text"`
					FunctionCall *struct {
						Name string          `json:"name"`
						Args json.RawMessage `json:"args"`
					} `json:"functionCall"`
				} `json:"parts"`
			} `json:"content"`
			FinishReason string `json:"finishReason"`
		} `json:"candidates"`
		UsageMetadata map[string]int `json:"usageMetadata"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("a chunk the SDK cannot parse: %v: %s", err, data)
	}
	if len(r.Candidates) != 1 || r.Candidates[0].Content.Role != "model" {
		t.Fatalf("got %s, want one candidate with role model", data)
	}
	c := r.Candidates[0]
	for _, p := range c.Content.Parts {
		if p.Text != nil {
			a.text += *p.Text
		}
		if p.FunctionCall != nil {
			a.calls = append(a.calls, p.FunctionCall.Name+" "+string(p.FunctionCall.Args))
		}
	}
	if c.FinishReason != "" {
		a.finishReason = c.FinishReason
	}
	if r.UsageMetadata != nil {
		a.usage = r.UsageMetadata
	}
}

// TestGeminiCLIRequests: the requests the Gemini CLI sent in a session
// with a tool call (its session context, the prompt, its tools, then the
// shell command's output as a functionResponse with the CLI's own call
// id) take the script's turns, streamed and not, and the SDK reads the
// answers: the text, the function call with its arguments, STOP and the
// usage.
func TestGeminiCLIRequests(t *testing.T) {
	first, err := os.ReadFile("testdata/gemini-cli-1.json")
	if err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile("testdata/gemini-cli-2.json")
	if err != nil {
		t.Fatal(err)
	}
	const script = `turns:
  - match: {model: gemini-2.5-pro, tool_result: run_shell_command}
    reply: {text: "Done: sbx-mock.txt is written.", usage: {input_tokens: 900, output_tokens: 7}}
    times: unlimited
  - match: {model: gemini-2.5-pro, user: "write sbx-mock.txt", normalize: true}
    reply:
      text: "I will write the file, then list the directory."
      tool_calls:
        - name: run_shell_command
          input: {command: "printf 'written by the scripted model\\n' > sbx-mock.txt && ls", description: "Write sbx-mock.txt and list the files"}
      usage: {input_tokens: 800, output_tokens: 30}
    times: unlimited
`
	r, srv := mock(t, script)
	for _, method := range []string{"streamGenerateContent", "generateContent"} {
		t.Run(method, func(t *testing.T) {
			a, err := geminiClient(t, srv.URL, "gemini-2.5-pro", method, first)
			if err != nil {
				t.Fatal(err)
			}
			want := geminiAnswer{
				text:         "I will write the file, then list the directory.",
				calls:        []string{`run_shell_command {"command":"printf 'written by the scripted model\\n' > sbx-mock.txt && ls","description":"Write sbx-mock.txt and list the files"}`},
				finishReason: "STOP",
				usage:        map[string]int{"promptTokenCount": 800, "candidatesTokenCount": 30, "totalTokenCount": 830},
			}
			if fmt.Sprint(*a) != fmt.Sprint(want) {
				t.Errorf("got %+v, want %+v", *a, want)
			}
			a, err = geminiClient(t, srv.URL, "gemini-2.5-pro", method, second)
			if err != nil {
				t.Fatal(err)
			}
			if a.text != "Done: sbx-mock.txt is written." || len(a.calls) != 0 || a.finishReason != "STOP" {
				t.Errorf("the answer to the function's response: got %+v", *a)
			}
		})
	}
	for _, j := range r.Requests() {
		if j.Unmatched || j.Dialect != mockllm.Gemini || j.Model != "gemini-2.5-pro" {
			t.Errorf("request %d: %s (dialect %s, model %q); want a turn, gemini, gemini-2.5-pro", j.Seq, j.Outcome, j.Dialect, j.Model)
		}
	}
	// A model no turn matches: the SDK's ApiError, 400 INVALID_ARGUMENT,
	// its message naming the request and the turn.
	_, err = geminiClient(t, srv.URL, "gemini-2.5-flash", "streamGenerateContent", first)
	var ge *geminiError
	if e, ok := err.(*geminiError); ok {
		ge = e
	}
	if ge == nil || ge.status != 400 || ge.code != "INVALID_ARGUMENT" || !strings.Contains(ge.message, `model "gemini-2.5-flash"`) {
		t.Errorf("got error %v, want 400 INVALID_ARGUMENT naming the model", err)
	}
}

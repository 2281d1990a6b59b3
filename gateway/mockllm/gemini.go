package mockllm

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The Gemini API (generativelanguage.googleapis.com) names the model in
// the path and the method after a colon:
//
//	POST /v1beta/models/MODEL:generateContent
//	POST /v1beta/models/MODEL:streamGenerateContent?alt=sse
//	POST /v1beta/models/MODEL:countTokens
//	GET  /v1beta/models, GET /v1beta/models/MODEL
//
// A reply's function calls are functionCall parts of the model's
// content; their results come back as functionResponse parts of the next
// request's last content, named by the function (and by the call's id
// when the call had one). The API key (x-goog-api-key or ?key=) is never
// checked.

// geminiVersions are the API versions whose paths the mock answers.
var geminiVersions = []string{"/v1beta/", "/v1/", "/v1alpha/"}

// Gemini's methods.
const (
	geminiGenerate    = "generateContent"
	geminiStream      = "streamGenerateContent"
	geminiCountTokens = "countTokens"
)

// geminiPath splits a Gemini API path into the model and the method
// after the colon ("" for a GET of the model); ok is false for a path
// that is not under a version's models/.
func geminiPath(path string) (model, method string, ok bool) {
	for _, v := range geminiVersions {
		rest, found := strings.CutPrefix(path, v+"models/")
		if !found || rest == "" {
			continue
		}
		model, method, _ = strings.Cut(rest, ":")
		if model == "" || strings.Contains(model, "/") {
			return "", "", false
		}
		return model, method, true
	}
	return "", "", false
}

// isGeminiModels reports whether path is a Gemini version's models list
// but /v1/models, which OpenAI's API has too (errorDialect tells them
// apart).
func isGeminiModels(path string) bool {
	return path == "/v1beta/models" || path == "/v1alpha/models"
}

// isGeminiCount reports whether path is a model's :countTokens.
func isGeminiCount(path string) bool {
	_, method, ok := geminiPath(path)
	return ok && method == geminiCountTokens
}

// isGeminiModel reports whether hr asks for a model (GET models/MODEL) of
// the Gemini API: under /v1/, which OpenAI's API has too, only with
// Google's key.
func isGeminiModel(hr *http.Request) bool {
	_, method, ok := geminiPath(hr.URL.Path)
	return ok && method == "" && (!strings.HasPrefix(hr.URL.Path, "/v1/") || isGeminiRequest(hr))
}

// isGeminiRequest reports whether a request that names no dialect by its
// path is the Gemini API's, for its error shape: a path under /v1beta/
// or /v1alpha/, or an API key in Google's header or query.
func isGeminiRequest(hr *http.Request) bool {
	p := hr.URL.Path
	return strings.HasPrefix(p, "/v1beta/") || strings.HasPrefix(p, "/v1alpha/") ||
		hr.Header.Get("x-goog-api-key") != "" || hr.URL.Query().Has("key")
}

// geminiPart is a part of a Gemini content: text, a function call or a
// function's response.
type geminiPart struct {
	Text             *string             `json:"text,omitempty"`
	FunctionCall     *geminiFunctionCall `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"functionResponse,omitempty"`
}

type geminiFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type geminiContent struct {
	Parts []geminiPart `json:"parts"`
	Role  string       `json:"role,omitempty"`
}

// geminiCallKey is the key of a function call in request.calls: its id,
// or its name when it has none (the Gemini API gives calls no ids).
func geminiCallKey(id, name string) string {
	if id != "" {
		return id
	}
	return "gemini-function:" + name
}

// parseGemini reads a generateContent request: the model and whether it
// streams from the path, the rest from the body's contents.
func (req *request) parseGemini(path string, body []byte) error {
	model, method, _ := geminiPath(path)
	req.model, req.stream = model, method == geminiStream
	var b struct {
		Contents []geminiContent `json:"contents"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return bodyError(err)
	}
	for i, c := range b.Contents {
		var texts []string
		for _, p := range c.Parts {
			switch {
			case p.FunctionCall != nil:
				req.calls[geminiCallKey(p.FunctionCall.ID, p.FunctionCall.Name)] = p.FunctionCall.Name
			case p.FunctionResponse != nil && i == len(b.Contents)-1:
				key := geminiCallKey(p.FunctionResponse.ID, p.FunctionResponse.Name)
				req.calls[key] = p.FunctionResponse.Name
				req.toolResults = append(req.toolResults, key)
			case p.Text != nil && *p.Text != "":
				texts = append(texts, *p.Text)
			}
		}
		if (c.Role == "user" || c.Role == "") && len(texts) > 0 {
			req.user = strings.Join(texts, "\n")
		}
	}
	return nil
}

// geminiUsage is a response's usageMetadata.
type geminiUsage struct {
	PromptTokenCount     int `json:"promptTokenCount"`
	CandidatesTokenCount int `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount      int `json:"totalTokenCount"`
}

type geminiCandidate struct {
	Content      geminiContent `json:"content"`
	FinishReason string        `json:"finishReason,omitempty"`
	Index        int           `json:"index"`
}

// geminiResponse is a GenerateContentResponse, or a chunk of a stream.
type geminiResponse struct {
	Candidates    []geminiCandidate `json:"candidates"`
	UsageMetadata *geminiUsage      `json:"usageMetadata,omitempty"`
	ModelVersion  string            `json:"modelVersion"`
	ResponseID    string            `json:"responseId"`
}

// geminiEvent is an event of a Gemini stream: a data line and a blank
// line, ended by CRLF as Google's servers end them.
func geminiEvent(data any) []byte {
	return append(append([]byte("data: "), marshal(data)...), "\r\n\r\n"...)
}

func renderGemini(req *request, r *Reply) *answer {
	u := usageOf(req, r)
	finish := stopReason(Gemini, r)
	id := strings.ToLower(rand16())
	var parts []geminiPart
	if r.Text != "" {
		text := r.Text
		parts = append(parts, geminiPart{Text: &text})
	}
	for _, c := range r.ToolCalls {
		// The API's calls carry no id unless the script gives one.
		parts = append(parts, geminiPart{FunctionCall: &geminiFunctionCall{ID: c.ID, Name: c.Name, Args: c.Input}})
	}
	if len(parts) == 0 {
		empty := ""
		parts = []geminiPart{{Text: &empty}}
	}
	usage := &geminiUsage{u.InputTokens, u.OutputTokens, u.InputTokens + u.OutputTokens}
	resp := func(parts []geminiPart, finish string, usage *geminiUsage) geminiResponse {
		return geminiResponse{
			Candidates:    []geminiCandidate{{Content: geminiContent{Parts: parts, Role: "model"}, FinishReason: finish}},
			UsageMetadata: usage,
			ModelVersion:  req.model,
			ResponseID:    id,
		}
	}
	if !req.stream {
		a := newAnswer(http.StatusOK, contentJSON, false)
		a.pieces = [][]byte{marshal(resp(parts, finish, usage))}
		return a
	}
	// Text streams in chunks; function calls come whole, in the last
	// chunk, which carries the finish reason and the full usage.
	a := newAnswer(http.StatusOK, contentSSE, true)
	var pieces [][]geminiPart
	for _, c := range chunks(r.Text, chunkSize(r)) {
		pieces = append(pieces, []geminiPart{{Text: &c}})
	}
	var calls []geminiPart
	for _, p := range parts {
		if p.FunctionCall != nil {
			calls = append(calls, p)
		}
	}
	if len(calls) > 0 || len(pieces) == 0 {
		if len(calls) == 0 {
			calls = parts // the empty text
		}
		pieces = append(pieces, calls)
	}
	partial := &geminiUsage{PromptTokenCount: u.InputTokens, TotalTokenCount: u.InputTokens}
	for i, p := range pieces {
		if i == len(pieces)-1 {
			a.pieces = append(a.pieces, geminiEvent(resp(p, finish, usage)))
			break
		}
		a.pieces = append(a.pieces, geminiEvent(resp(p, "", partial)))
	}
	return a
}

// rand16 returns a random id of 16 characters, as a responseId looks.
func rand16() string {
	s := newID("")
	if len(s) > 16 {
		s = s[:16]
	}
	return s
}

// geminiStatuses are the status names of Google's errors by HTTP status.
var geminiStatuses = map[int]string{
	400: "INVALID_ARGUMENT",
	401: "UNAUTHENTICATED",
	403: "PERMISSION_DENIED",
	404: "NOT_FOUND",
	409: "ABORTED",
	413: "INVALID_ARGUMENT",
	429: "RESOURCE_EXHAUSTED",
	499: "CANCELLED",
	500: "INTERNAL",
	501: "NOT_IMPLEMENTED",
	503: "UNAVAILABLE",
	504: "DEADLINE_EXCEEDED",
}

// geminiErrorBody is an error in Google's shape:
// {"error": {"code": 400, "message": "...", "status": "INVALID_ARGUMENT"}}.
func geminiErrorBody(status int, msg string) []byte {
	name, ok := geminiStatuses[status]
	if !ok {
		name = "INVALID_ARGUMENT"
		if status >= 500 {
			name = "INTERNAL"
		}
	}
	type detail struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	}
	return marshal(struct {
		Error detail `json:"error"`
	}{detail{status, msg, name}})
}

// geminiModel is a Model of the models list.
type geminiModel struct {
	Name                       string   `json:"name"`
	Version                    string   `json:"version"`
	DisplayName                string   `json:"displayName"`
	Description                string   `json:"description"`
	InputTokenLimit            int      `json:"inputTokenLimit"`
	OutputTokenLimit           int      `json:"outputTokenLimit"`
	SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
}

func newGeminiModel(id string) geminiModel {
	return geminiModel{
		Name:                       "models/" + id,
		Version:                    "001",
		DisplayName:                id,
		Description:                "A model of the sbx mock LLM, answered from its script.",
		InputTokenLimit:            1048576,
		OutputTokenLimit:           65536,
		SupportedGenerationMethods: []string{geminiGenerate, geminiCountTokens},
	}
}

// geminiModelsBody is the answer of GET /v1beta/models.
func geminiModelsBody(models []string) []byte {
	list := struct {
		Models []geminiModel `json:"models"`
	}{Models: []geminiModel{}}
	for _, m := range models {
		list.Models = append(list.Models, newGeminiModel(m))
	}
	return marshal(list)
}

// geminiCountBody is the answer of :countTokens.
func geminiCountBody(n int) []byte {
	type detail struct {
		Modality   string `json:"modality"`
		TokenCount int    `json:"tokenCount"`
	}
	return marshal(struct {
		TotalTokens         int      `json:"totalTokens"`
		PromptTokensDetails []detail `json:"promptTokensDetails"`
	}{n, []detail{{"TEXT", n}}})
}

// readGemini reads a reply from GenerateContentResponses: one answer, or
// the chunks of a stream in order.
func readGemini(r *Reply, docs [][]byte) {
	var text strings.Builder
	for _, data := range docs {
		var resp struct {
			Candidates []struct {
				Content struct {
					Parts []struct {
						Text         string              `json:"text"`
						Thought      bool                `json:"thought"`
						FunctionCall *geminiFunctionCall `json:"functionCall"`
					} `json:"parts"`
				} `json:"content"`
				FinishReason string `json:"finishReason"`
			} `json:"candidates"`
			UsageMetadata *geminiUsage `json:"usageMetadata"`
		}
		if json.Unmarshal(data, &resp) != nil {
			continue
		}
		if u := resp.UsageMetadata; u != nil {
			r.Usage = &Usage{u.PromptTokenCount, u.CandidatesTokenCount}
		}
		if len(resp.Candidates) == 0 {
			continue
		}
		c := resp.Candidates[0]
		for _, p := range c.Content.Parts {
			switch {
			case p.FunctionCall != nil:
				r.ToolCalls = append(r.ToolCalls, ToolCall{ID: p.FunctionCall.ID, Name: p.FunctionCall.Name, Input: objectOrNil(p.FunctionCall.Args)})
			case !p.Thought:
				text.WriteString(p.Text)
			}
		}
		switch c.FinishReason {
		case "", "STOP", "FINISH_REASON_UNSPECIFIED":
		case "MAX_TOKENS":
			r.StopReason = "max_tokens"
		case "SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII":
			r.StopReason = "content_filter"
		default:
			r.StopReason = c.FinishReason
		}
	}
	r.Text = text.String()
}

// geminiStreamDone reports whether a Gemini stream's last event ends it:
// a chunk with a finish reason.
func geminiStreamDone(data string) bool {
	var resp struct {
		Candidates []struct {
			FinishReason string `json:"finishReason"`
		} `json:"candidates"`
	}
	return json.Unmarshal([]byte(data), &resp) == nil && len(resp.Candidates) > 0 && resp.Candidates[0].FinishReason != ""
}

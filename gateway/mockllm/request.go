package mockllm

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// dialectOf returns the dialect served at path.
func dialectOf(path string) (Dialect, bool) {
	if _, method, ok := geminiPath(path); ok && (method == geminiGenerate || method == geminiStream) {
		return Gemini, true
	}
	switch path {
	case "/v1/messages":
		return Anthropic, true
	case "/v1/chat/completions":
		return ChatCompletions, true
	case "/v1/responses":
		return Responses, true
	}
	return "", false
}

// request is what matching and answering need of an API request.
type request struct {
	dialect Dialect
	model   string
	stream  bool
	// includeUsage is Chat Completions' stream_options.include_usage.
	includeUsage bool
	// user is the text of the last user message that has text.
	user string
	// toolResults are the ids of the tool calls whose results are in the
	// last message, in order.
	toolResults []string
	// calls maps the ids of the tool calls in the conversation to their
	// tools' names.
	calls map[string]string
	// size is the body's length, for estimated usage.
	size int
	// normUser is user normalized, made when a turn first asks for it.
	normUser *string
}

// normalizedUser returns the last user message normalized by
// NormalizeUser, normalizing it once.
func (req *request) normalizedUser() string {
	if req.normUser == nil {
		n := NormalizeUser(req.user)
		req.normUser = &n
	}
	return *req.normUser
}

// parseRequest reads what matching needs from an API request's path (the
// Gemini API's names the model) and body. An error is a body the API
// would refuse with 400.
func parseRequest(d Dialect, path string, body []byte) (*request, error) {
	req := &request{dialect: d, calls: map[string]string{}, size: len(body)}
	var err error
	switch d {
	case Anthropic:
		err = req.parseAnthropic(body)
	case ChatCompletions:
		err = req.parseChat(body)
	case Responses:
		err = req.parseResponses(body)
	case Gemini:
		err = req.parseGemini(path, body)
	}
	if err != nil {
		return nil, err
	}
	return req, nil
}

// bodyError describes a body that is not JSON, or not the JSON wanted.
func bodyError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("the request body is not valid JSON: %v", err)
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("the request body does not have the API's shape: %s may not be a JSON %s", te.Field, te.Value)
	}
	return fmt.Errorf("the request body does not have the API's shape: %v", err)
}

// textOf returns the text of a message's content: a string, or the text
// of its parts of the given types, joined by newlines.
func textOf(content json.RawMessage, types ...string) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(content, &parts) != nil {
		return ""
	}
	var texts []string
	for _, p := range parts {
		if slices.Contains(types, p.Type) && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

func (req *request) parseAnthropic(body []byte) error {
	var b struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return bodyError(err)
	}
	req.model, req.stream = b.Model, b.Stream
	type block struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		Name      string `json:"name"`
		ToolUseID string `json:"tool_use_id"`
	}
	for i, m := range b.Messages {
		var blocks []block
		_ = json.Unmarshal(m.Content, &blocks) // a string has no blocks
		for _, bl := range blocks {
			if bl.Type == "tool_use" && bl.ID != "" {
				req.calls[bl.ID] = bl.Name
			}
		}
		if m.Role != "user" {
			continue
		}
		if t := textOf(m.Content, "text"); t != "" {
			req.user = t
		}
		if i == len(b.Messages)-1 {
			for _, bl := range blocks {
				if bl.Type == "tool_result" {
					req.toolResults = append(req.toolResults, bl.ToolUseID)
				}
			}
		}
	}
	return nil
}

func (req *request) parseChat(body []byte) error {
	var b struct {
		Model         string `json:"model"`
		Stream        bool   `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return bodyError(err)
	}
	req.model, req.stream = b.Model, b.Stream
	req.includeUsage = b.StreamOptions != nil && b.StreamOptions.IncludeUsage
	for _, m := range b.Messages {
		for _, c := range m.ToolCalls {
			if c.ID != "" {
				req.calls[c.ID] = c.Function.Name
			}
		}
		if m.Role == "user" {
			if t := textOf(m.Content, "text"); t != "" {
				req.user = t
			}
		}
	}
	// The last message's tool results: the tool messages that end the
	// conversation (parallel calls give one message each).
	for i := len(b.Messages) - 1; i >= 0 && b.Messages[i].Role == "tool"; i-- {
		req.toolResults = append([]string{b.Messages[i].ToolCallID}, req.toolResults...)
	}
	return nil
}

func (req *request) parseResponses(body []byte) error {
	var b struct {
		Model  string          `json:"model"`
		Stream bool            `json:"stream"`
		Input  json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return bodyError(err)
	}
	req.model, req.stream = b.Model, b.Stream
	var s string
	if json.Unmarshal(b.Input, &s) == nil {
		req.user = s
		return nil
	}
	var items []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		CallID  string          `json:"call_id"`
		Name    string          `json:"name"`
	}
	if len(b.Input) > 0 {
		if err := json.Unmarshal(b.Input, &items); err != nil {
			return bodyError(err)
		}
	}
	for _, it := range items {
		switch {
		case (it.Type == "function_call" || it.Type == "custom_tool_call") && it.CallID != "":
			req.calls[it.CallID] = it.Name
		case (it.Type == "" || it.Type == "message") && it.Role == "user":
			if t := textOf(it.Content, "input_text", "text"); t != "" {
				req.user = t
			}
		}
	}
	for i := len(items) - 1; i >= 0 && (items[i].Type == "function_call_output" || items[i].Type == "custom_tool_call_output"); i-- {
		req.toolResults = append([]string{items[i].CallID}, req.toolResults...)
	}
	return nil
}

package mockllm

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// answer is a response ready to send: status, headers and the body in
// pieces, the events of a stream or one JSON document.
type answer struct {
	status int
	header http.Header
	pieces [][]byte
	stream bool
	// gap is the wait between pieces.
	gap time.Duration
}

// Content types of answers.
const (
	contentJSON = "application/json"
	contentSSE  = "text/event-stream; charset=utf-8"
)

func newAnswer(status int, contentType string, stream bool) *answer {
	h := http.Header{}
	h.Set("Content-Type", contentType)
	if stream {
		h.Set("Cache-Control", "no-cache")
	}
	return &answer{status: status, header: h, stream: stream}
}

// newID returns prefix and a random suffix, as the APIs' ids look.
func newID(prefix string) string {
	return prefix + rand.Text()
}

// marshal encodes v as compact JSON without HTML escaping, as the APIs
// write it.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Every value given here is made of strings, numbers and
		// json.RawMessage that CheckTurns has checked.
		panic("mockllm: encoding an answer: " + err.Error())
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// event is an SSE event with a name (Anthropic, Responses).
func event(name string, data any) []byte {
	return append(append([]byte("event: "+name+"\ndata: "), marshal(data)...), "\n\n"...)
}

// dataEvent is an SSE event without a name (Chat Completions).
func dataEvent(data any) []byte {
	return append(append([]byte("data: "), marshal(data)...), "\n\n"...)
}

// chunks splits s into pieces of n characters (runes); "" gives none.
func chunks(s string, n int) []string {
	var out []string
	for s != "" {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// stopNames translates stop reasons between dialects: each row is one
// reason as Anthropic, Chat Completions, Responses (a status, with the
// incomplete_details reason after a colon) and Gemini (a finishReason)
// say it.
var stopNames = map[string][4]string{
	"end_turn":       {"end_turn", "stop", "completed", "STOP"},
	"stop":           {"end_turn", "stop", "completed", "STOP"},
	"completed":      {"end_turn", "stop", "completed", "STOP"},
	"STOP":           {"end_turn", "stop", "completed", "STOP"},
	"tool_use":       {"tool_use", "tool_calls", "completed", "STOP"},
	"tool_calls":     {"tool_use", "tool_calls", "completed", "STOP"},
	"max_tokens":     {"max_tokens", "length", "incomplete:max_output_tokens", "MAX_TOKENS"},
	"length":         {"max_tokens", "length", "incomplete:max_output_tokens", "MAX_TOKENS"},
	"incomplete":     {"max_tokens", "length", "incomplete:max_output_tokens", "MAX_TOKENS"},
	"MAX_TOKENS":     {"max_tokens", "length", "incomplete:max_output_tokens", "MAX_TOKENS"},
	"refusal":        {"refusal", "content_filter", "incomplete:content_filter", "SAFETY"},
	"content_filter": {"refusal", "content_filter", "incomplete:content_filter", "SAFETY"},
	"SAFETY":         {"refusal", "content_filter", "incomplete:content_filter", "SAFETY"},
	"stop_sequence":  {"stop_sequence", "stop", "completed", "STOP"},
	"pause_turn":     {"pause_turn", "stop", "completed", "STOP"},
}

// stopReason returns a reply's stop reason in dialect d.
func stopReason(d Dialect, r *Reply) string {
	s := r.StopReason
	if s == "" {
		s = "end_turn"
		if len(r.ToolCalls) > 0 {
			s = "tool_use"
		}
	}
	names, ok := stopNames[s]
	if !ok {
		return s
	}
	switch d {
	case Anthropic:
		return names[0]
	case ChatCompletions:
		return names[1]
	case Gemini:
		return names[3]
	}
	return names[2]
}

// usageOf returns a reply's usage, estimated when the script gives none.
func usageOf(req *request, r *Reply) Usage {
	if r.Usage != nil {
		return *r.Usage
	}
	out := len(r.Text)
	for _, c := range r.ToolCalls {
		out += len(c.Name) + len(c.Input)
		if c.Custom != nil {
			out += len(*c.Custom)
		}
	}
	return Usage{InputTokens: max(1, (req.size+3)/4), OutputTokens: max(1, (out+3)/4)}
}

// withIDs returns a reply's tool calls with an id for each that has none,
// in dialect d's form, and their inputs filled in.
func withIDs(d Dialect, calls []ToolCall) []ToolCall {
	out := make([]ToolCall, len(calls))
	for i, c := range calls {
		if c.ID == "" && d != Gemini { // Gemini's calls have no ids
			if d == Anthropic {
				c.ID = newID("toolu_")
			} else {
				c.ID = newID("call_")
			}
		}
		if len(c.Input) == 0 && c.Custom == nil {
			c.Input = json.RawMessage("{}")
		}
		out[i] = c
	}
	return out
}

// renderReply renders a reply, whose tool calls have ids, for req: the
// recorded answer when it fits, or one made from the fields.
func renderReply(req *request, r *Reply) *answer {
	if raw := r.Raw; raw.fits(req) {
		var a *answer
		if req.stream {
			a = newAnswer(http.StatusOK, contentSSE, true)
			for _, e := range raw.Events {
				a.pieces = append(a.pieces, []byte(e))
			}
		} else {
			a = newAnswer(http.StatusOK, contentJSON, false)
			a.pieces = [][]byte{[]byte(raw.Body)}
		}
		a.gap = time.Duration(r.ChunkDelayMS) * time.Millisecond
		return a
	}
	var a *answer
	switch req.dialect {
	case Anthropic:
		a = renderAnthropic(req, r)
	case ChatCompletions:
		a = renderChat(req, r)
	case Gemini:
		a = renderGemini(req, r)
	default:
		a = renderResponses(req, r)
	}
	a.gap = time.Duration(r.ChunkDelayMS) * time.Millisecond
	return a
}

// fits reports whether a recorded answer answers req as it is: the same
// dialect, streaming or not alike.
func (raw *Raw) fits(req *request) bool {
	return raw != nil && raw.Dialect == req.dialect && (len(raw.Events) > 0) == req.stream
}

func chunkSize(r *Reply) int {
	if r.ChunkSize > 0 {
		return r.ChunkSize
	}
	return DefaultChunkSize
}

// Anthropic Messages.

type anthropicMessage struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Model        string          `json:"model"`
	Content      []any           `json:"content"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence *string         `json:"stop_sequence"`
	Usage        *anthropicUsage `json:"usage"`
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

type anthropicText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

func renderAnthropic(req *request, r *Reply) *answer {
	u := usageOf(req, r)
	stop := stopReason(Anthropic, r)
	msg := anthropicMessage{
		ID:      newID("msg_"),
		Type:    "message",
		Role:    "assistant",
		Model:   req.model,
		Content: []any{},
		Usage:   &anthropicUsage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens},
	}
	if !req.stream {
		a := newAnswer(http.StatusOK, contentJSON, false)
		if r.Text != "" {
			msg.Content = append(msg.Content, anthropicText{"text", r.Text})
		}
		for _, c := range r.ToolCalls {
			msg.Content = append(msg.Content, anthropicToolUse{"tool_use", c.ID, c.Name, c.Input})
		}
		msg.StopReason = &stop
		a.pieces = [][]byte{marshal(msg)}
		return a
	}
	a := newAnswer(http.StatusOK, contentSSE, true)
	add := func(name string, data any) { a.pieces = append(a.pieces, event(name, data)) }
	start := msg
	start.Usage = &anthropicUsage{InputTokens: u.InputTokens, OutputTokens: 1}
	add("message_start", struct {
		Type    string           `json:"type"`
		Message anthropicMessage `json:"message"`
	}{"message_start", start})
	// The API pings after the first block starts (after message_start
	// when there is none).
	pinged := false
	ping := func() {
		if !pinged {
			a.pieces = append(a.pieces, []byte("event: ping\ndata: {\"type\": \"ping\"}\n\n"))
			pinged = true
		}
	}
	type delta struct {
		Type        string  `json:"type"`
		Text        *string `json:"text,omitempty"`
		PartialJSON *string `json:"partial_json,omitempty"`
	}
	type blockDelta struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta delta  `json:"delta"`
	}
	type blockStart struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock any    `json:"content_block"`
	}
	type blockStop struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	index := 0
	if r.Text != "" {
		add("content_block_start", blockStart{"content_block_start", index, anthropicText{"text", ""}})
		ping()
		for _, c := range chunks(r.Text, chunkSize(r)) {
			add("content_block_delta", blockDelta{"content_block_delta", index, delta{Type: "text_delta", Text: &c}})
		}
		add("content_block_stop", blockStop{"content_block_stop", index})
		index++
	}
	for _, call := range r.ToolCalls {
		add("content_block_start", blockStart{"content_block_start", index, anthropicToolUse{"tool_use", call.ID, call.Name, json.RawMessage("{}")}})
		ping()
		empty := ""
		add("content_block_delta", blockDelta{"content_block_delta", index, delta{Type: "input_json_delta", PartialJSON: &empty}})
		for _, c := range chunks(string(call.Input), chunkSize(r)) {
			add("content_block_delta", blockDelta{"content_block_delta", index, delta{Type: "input_json_delta", PartialJSON: &c}})
		}
		add("content_block_stop", blockStop{"content_block_stop", index})
		index++
	}
	ping()
	type stopDelta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
	type outputUsage struct {
		OutputTokens int `json:"output_tokens"`
	}
	add("message_delta", struct {
		Type  string      `json:"type"`
		Delta stopDelta   `json:"delta"`
		Usage outputUsage `json:"usage"`
	}{"message_delta", stopDelta{StopReason: stop}, outputUsage{u.OutputTokens}})
	add("message_stop", struct {
		Type string `json:"type"`
	}{"message_stop"})
	return a
}

// OpenAI Chat Completions.

type chatFunction struct {
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

type chatToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function chatFunction `json:"function"`
}

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func renderChat(req *request, r *Reply) *answer {
	u := usageOf(req, r)
	usage := &chatUsage{u.InputTokens, u.OutputTokens, u.InputTokens + u.OutputTokens}
	stop := stopReason(ChatCompletions, r)
	id := newID("chatcmpl-")
	created := time.Now().Unix()
	if !req.stream {
		type message struct {
			Role      string         `json:"role"`
			Content   *string        `json:"content"`
			Refusal   *string        `json:"refusal"`
			ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
		}
		m := message{Role: "assistant"}
		if r.Text != "" || len(r.ToolCalls) == 0 {
			text := r.Text
			m.Content = &text
		}
		for _, c := range r.ToolCalls {
			args := string(c.Input)
			m.ToolCalls = append(m.ToolCalls, chatToolCall{ID: c.ID, Type: "function", Function: chatFunction{c.Name, &args}})
		}
		type choice struct {
			Index        int     `json:"index"`
			Message      message `json:"message"`
			Logprobs     any     `json:"logprobs"`
			FinishReason string  `json:"finish_reason"`
		}
		a := newAnswer(http.StatusOK, contentJSON, false)
		a.pieces = [][]byte{marshal(struct {
			ID      string     `json:"id"`
			Object  string     `json:"object"`
			Created int64      `json:"created"`
			Model   string     `json:"model"`
			Choices []choice   `json:"choices"`
			Usage   *chatUsage `json:"usage"`
		}{id, "chat.completion", created, req.model, []choice{{Message: m, FinishReason: stop}}, usage})}
		return a
	}
	a := newAnswer(http.StatusOK, contentSSE, true)
	type delta struct {
		Role      string         `json:"role,omitempty"`
		Content   *string        `json:"content,omitempty"`
		ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Delta        delta   `json:"delta"`
		Logprobs     any     `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	}
	type chunk struct {
		ID      string     `json:"id"`
		Object  string     `json:"object"`
		Created int64      `json:"created"`
		Model   string     `json:"model"`
		Choices []choice   `json:"choices"`
		Usage   *chatUsage `json:"usage,omitempty"`
	}
	add := func(d delta, finish *string) {
		a.pieces = append(a.pieces, dataEvent(chunk{id, "chat.completion.chunk", created, req.model, []choice{{Delta: d, FinishReason: finish}}, nil}))
	}
	empty := ""
	add(delta{Role: "assistant", Content: &empty}, nil)
	for _, c := range chunks(r.Text, chunkSize(r)) {
		add(delta{Content: &c}, nil)
	}
	for i, call := range r.ToolCalls {
		add(delta{ToolCalls: []chatToolCall{{Index: &i, ID: call.ID, Type: "function", Function: chatFunction{call.Name, &empty}}}}, nil)
		for _, c := range chunks(string(call.Input), chunkSize(r)) {
			add(delta{ToolCalls: []chatToolCall{{Index: &i, Function: chatFunction{Arguments: &c}}}}, nil)
		}
	}
	add(delta{}, &stop)
	if req.includeUsage {
		a.pieces = append(a.pieces, dataEvent(chunk{id, "chat.completion.chunk", created, req.model, []choice{}, usage}))
	}
	a.pieces = append(a.pieces, []byte("data: [DONE]\n\n"))
	return a
}

// OpenAI Responses.

type responsesUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

type responsesText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type responsesMessage struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Status  string          `json:"status"`
	Role    string          `json:"role"`
	Content []responsesText `json:"content"`
}

type responsesCall struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Status    string `json:"status"`
	Arguments string `json:"arguments"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
}

// responsesCustomCall is a custom_tool_call output item, its fields in
// the API's order.
type responsesCustomCall struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Status string `json:"status"`
	CallID string `json:"call_id"`
	Input  string `json:"input"`
	Name   string `json:"name"`
}

type responsesObject struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	CreatedAt         int64           `json:"created_at"`
	Status            string          `json:"status"`
	Error             any             `json:"error"`
	IncompleteDetails any             `json:"incomplete_details"`
	Model             string          `json:"model"`
	Output            []any           `json:"output"`
	ParallelToolCalls bool            `json:"parallel_tool_calls"`
	ToolChoice        string          `json:"tool_choice"`
	Tools             []any           `json:"tools"`
	Usage             *responsesUsage `json:"usage"`
	Metadata          map[string]any  `json:"metadata"`
}

func renderResponses(req *request, r *Reply) *answer {
	u := usageOf(req, r)
	status, reason, _ := strings.Cut(stopReason(Responses, r), ":")
	resp := responsesObject{
		ID:                newID("resp_"),
		Object:            "response",
		CreatedAt:         time.Now().Unix(),
		Status:            status,
		Model:             req.model,
		Output:            []any{},
		ParallelToolCalls: true,
		ToolChoice:        "auto",
		Tools:             []any{},
		Metadata:          map[string]any{},
		Usage: &responsesUsage{
			InputTokens:         u.InputTokens,
			InputTokensDetails:  map[string]int{"cached_tokens": 0},
			OutputTokens:        u.OutputTokens,
			OutputTokensDetails: map[string]int{"reasoning_tokens": 0},
			TotalTokens:         u.InputTokens + u.OutputTokens,
		},
	}
	if reason != "" {
		resp.IncompleteDetails = map[string]string{"reason": reason}
	}
	msgID := newID("msg_")
	message := responsesMessage{msgID, "message", "completed", "assistant", []responsesText{{"output_text", r.Text, []any{}}}}
	if r.Text != "" {
		resp.Output = append(resp.Output, message)
	}
	calls := make([]any, len(r.ToolCalls))
	for i, c := range r.ToolCalls {
		if c.Custom != nil {
			calls[i] = responsesCustomCall{"custom_tool_call", newID("ctc_"), "completed", c.ID, *c.Custom, c.Name}
		} else {
			calls[i] = responsesCall{newID("fc_"), "function_call", "completed", string(c.Input), c.ID, c.Name}
		}
		resp.Output = append(resp.Output, calls[i])
	}
	if !req.stream {
		a := newAnswer(http.StatusOK, contentJSON, false)
		a.pieces = [][]byte{marshal(resp)}
		return a
	}
	a := newAnswer(http.StatusOK, contentSSE, true)
	seq := 0
	add := func(name string, fields map[string]any) {
		fields["type"] = name
		fields["sequence_number"] = seq
		seq++
		a.pieces = append(a.pieces, event(name, orderedEvent(fields)))
	}
	start := resp
	start.Status, start.IncompleteDetails, start.Output, start.Usage = "in_progress", nil, []any{}, nil
	add("response.created", map[string]any{"response": start})
	add("response.in_progress", map[string]any{"response": start})
	index := 0
	if r.Text != "" {
		open := message
		open.Status, open.Content = "in_progress", []responsesText{}
		add("response.output_item.added", map[string]any{"output_index": index, "item": open})
		add("response.content_part.added", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0, "part": responsesText{"output_text", "", []any{}}})
		for _, c := range chunks(r.Text, chunkSize(r)) {
			add("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0, "delta": c, "logprobs": []any{}})
		}
		add("response.output_text.done", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0, "text": r.Text, "logprobs": []any{}})
		add("response.content_part.done", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0, "part": message.Content[0]})
		add("response.output_item.done", map[string]any{"output_index": index, "item": message})
		index++
	}
	for _, item := range calls {
		switch call := item.(type) {
		case responsesCall:
			open := call
			open.Status, open.Arguments = "in_progress", ""
			add("response.output_item.added", map[string]any{"output_index": index, "item": open})
			for _, c := range chunks(call.Arguments, chunkSize(r)) {
				add("response.function_call_arguments.delta", map[string]any{"item_id": call.ID, "output_index": index, "delta": c})
			}
			add("response.function_call_arguments.done", map[string]any{"item_id": call.ID, "output_index": index, "name": call.Name, "arguments": call.Arguments})
		case responsesCustomCall:
			open := call
			open.Status, open.Input = "in_progress", ""
			add("response.output_item.added", map[string]any{"output_index": index, "item": open})
			for _, c := range chunks(call.Input, chunkSize(r)) {
				add("response.custom_tool_call_input.delta", map[string]any{"item_id": call.ID, "output_index": index, "delta": c})
			}
			add("response.custom_tool_call_input.done", map[string]any{"item_id": call.ID, "output_index": index, "input": call.Input})
		}
		add("response.output_item.done", map[string]any{"output_index": index, "item": item})
		index++
	}
	final := "response.completed"
	if status == "incomplete" {
		final = "response.incomplete"
	}
	add(final, map[string]any{"response": resp})
	return a
}

// orderedEvent writes a Responses event's fields in the order the API
// does: type first, then the rest, sequence_number last.
type orderedEvent map[string]any

var responsesFieldOrder = []string{"type", "response", "item_id", "output_index", "content_index", "item", "part", "delta", "name", "text", "arguments", "input", "logprobs", "sequence_number"}

func (e orderedEvent) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for _, k := range responsesFieldOrder {
		v, ok := e[k]
		if !ok {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		writeJSONString(&b, k)
		b.WriteByte(':')
		b.Write(marshal(v))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Errors in each dialect's shape.

// anthropicErrorTypes are the error types of the Anthropic API by status.
var anthropicErrorTypes = map[int]string{
	400: "invalid_request_error",
	401: "authentication_error",
	402: "billing_error",
	403: "permission_error",
	404: "not_found_error",
	413: "request_too_large",
	429: "rate_limit_error",
	500: "api_error",
	504: "timeout_error",
	529: "overloaded_error",
}

// openaiErrorTypes are the error type and code of the OpenAI API by status.
var openaiErrorTypes = map[int][2]string{
	400: {"invalid_request_error", ""},
	401: {"invalid_request_error", "invalid_api_key"},
	403: {"invalid_request_error", "unsupported_country_region_territory"},
	404: {"invalid_request_error", "not_found"},
	413: {"invalid_request_error", "request_too_large"},
	429: {"requests", "rate_limit_exceeded"},
	500: {"server_error", ""},
	503: {"server_error", "overloaded"},
}

// errorBody returns an error document in dialect d's shape.
func errorBody(d Dialect, status int, msg string) []byte {
	if d == Gemini {
		return geminiErrorBody(status, msg)
	}
	if d == Anthropic {
		typ, ok := anthropicErrorTypes[status]
		if !ok {
			typ = "invalid_request_error"
			if status >= 500 {
				typ = "api_error"
			}
		}
		type detail struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		return marshal(struct {
			Type  string `json:"type"`
			Error detail `json:"error"`
		}{"error", detail{typ, msg}})
	}
	tc, ok := openaiErrorTypes[status]
	if !ok {
		tc = [2]string{"invalid_request_error", ""}
		if status >= 500 {
			tc = [2]string{"server_error", ""}
		}
	}
	var code any
	if tc[1] != "" {
		code = tc[1]
	}
	type body struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Param   any    `json:"param"`
		Code    any    `json:"code"`
	}
	return marshal(struct {
		Error body `json:"error"`
	}{body{msg, tc[0], nil, code}})
}

// errorAnswer is an error in dialect d's shape.
func errorAnswer(d Dialect, status int, msg string) *answer {
	a := newAnswer(status, contentJSON, false)
	a.pieces = [][]byte{errorBody(d, status, msg)}
	return a
}

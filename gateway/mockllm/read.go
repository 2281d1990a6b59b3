package mockllm

import (
	"encoding/json"
	"strings"
)

// Reading answers back into replies: the Recorder makes turns of what the
// APIs answer, and the tests check what the Responder renders.

// splitEvents splits an event stream after each blank line; joined, the
// events are the stream again. Bytes after the last blank line are the
// last event.
func splitEvents(b []byte) []string {
	var events []string
	start, i := 0, 0
	for i < len(b) {
		// Find the end of the line at i and whether it is blank.
		j := i
		for j < len(b) && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		blank := j == i
		switch {
		case j == len(b):
			i = j
		case b[j] == '\r' && j+1 < len(b) && b[j+1] == '\n':
			i = j + 2
		default:
			i = j + 1
		}
		if blank && j < len(b) {
			events = append(events, string(b[start:i]))
			start = i
		}
	}
	if start < len(b) {
		events = append(events, string(b[start:]))
	}
	return events
}

// parseEvent returns an event's name and its data lines joined by "\n".
func parseEvent(e string) (name, data string) {
	var lines []string
	for _, line := range strings.FieldsFunc(e, func(r rune) bool { return r == '\n' || r == '\r' }) {
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			lines = append(lines, value)
		}
	}
	return name, strings.Join(lines, "\n")
}

// replyOfJSON reads a reply from an answer in JSON.
func replyOfJSON(d Dialect, answer []byte) *Reply {
	r := &Reply{}
	switch d {
	case Anthropic:
		var m struct {
			Content []struct {
				Type  string          `json:"type"`
				Text  string          `json:"text"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			} `json:"content"`
			StopReason string `json:"stop_reason"`
			Usage      *struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal(answer, &m) // what cannot be read is left out; Raw has it all
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				r.Text += b.Text
			case "tool_use":
				r.ToolCalls = append(r.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Input: objectOrNil(b.Input)})
			}
		}
		r.StopReason = m.StopReason
		if m.Usage != nil {
			r.Usage = &Usage{m.Usage.InputTokens, m.Usage.OutputTokens}
		}
	case ChatCompletions:
		var c struct {
			Choices []struct {
				Message struct {
					Content   string         `json:"content"`
					ToolCalls []chatToolCall `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
			Usage *chatUsage `json:"usage"`
		}
		_ = json.Unmarshal(answer, &c)
		if len(c.Choices) > 0 {
			ch := c.Choices[0]
			r.Text, r.StopReason = ch.Message.Content, ch.FinishReason
			for _, tc := range ch.Message.ToolCalls {
				r.ToolCalls = append(r.ToolCalls, chatCall(tc))
			}
		}
		if c.Usage != nil {
			r.Usage = &Usage{c.Usage.PromptTokens, c.Usage.CompletionTokens}
		}
	case Responses:
		readResponse(r, answer)
	case Gemini:
		readGemini(r, [][]byte{answer})
	}
	return r
}

// readResponse reads a reply from a Responses response object.
func readResponse(r *Reply, data []byte) {
	var resp struct {
		Status            string `json:"status"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
		Output []struct {
			Type    string `json:"type"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Input     string `json:"input"`
		} `json:"output"`
		Usage *struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(data, &resp)
	for _, item := range resp.Output {
		switch item.Type {
		case "message":
			for _, c := range item.Content {
				if c.Type == "output_text" {
					r.Text += c.Text
				}
			}
		case "function_call":
			r.ToolCalls = append(r.ToolCalls, ToolCall{ID: item.CallID, Name: item.Name, Input: objectOrNil(json.RawMessage(item.Arguments))})
		case "custom_tool_call":
			input := item.Input
			r.ToolCalls = append(r.ToolCalls, ToolCall{ID: item.CallID, Name: item.Name, Custom: &input})
		}
	}
	switch {
	case resp.Status == "incomplete" && resp.IncompleteDetails != nil && resp.IncompleteDetails.Reason == "content_filter":
		r.StopReason = "content_filter"
	case resp.Status != "" && resp.Status != "completed":
		r.StopReason = resp.Status
	}
	if resp.Usage != nil {
		r.Usage = &Usage{resp.Usage.InputTokens, resp.Usage.OutputTokens}
	}
}

// chatCall reads a Chat Completions tool call.
func chatCall(tc chatToolCall) ToolCall {
	c := ToolCall{ID: tc.ID, Name: tc.Function.Name}
	if tc.Function.Arguments != nil {
		c.Input = objectOrNil(json.RawMessage(*tc.Function.Arguments))
	}
	return c
}

// objectOrNil returns data if it is a JSON object, else nil (an input the
// script format cannot hold; the recorded answer keeps it).
func objectOrNil(data json.RawMessage) json.RawMessage {
	if !isJSONObject(data) {
		return nil
	}
	return append(json.RawMessage(nil), data...)
}

// replyOfStream reads a reply from the events of a stream.
func replyOfStream(d Dialect, events []string) *Reply {
	r := &Reply{}
	switch d {
	case Anthropic:
		type block struct {
			typ   string
			call  ToolCall
			input strings.Builder
		}
		var blocks []*block
		var usage Usage
		for _, e := range events {
			_, data := parseEvent(e)
			var ev struct {
				Type    string `json:"type"`
				Index   int    `json:"index"`
				Message struct {
					Usage struct {
						InputTokens  int `json:"input_tokens"`
						OutputTokens int `json:"output_tokens"`
					} `json:"usage"`
				} `json:"message"`
				ContentBlock struct {
					Type  string          `json:"type"`
					Text  string          `json:"text"`
					ID    string          `json:"id"`
					Name  string          `json:"name"`
					Input json.RawMessage `json:"input"`
				} `json:"content_block"`
				Delta struct {
					Type        string `json:"type"`
					Text        string `json:"text"`
					PartialJSON string `json:"partial_json"`
					StopReason  string `json:"stop_reason"`
				} `json:"delta"`
				Usage struct {
					InputTokens  *int `json:"input_tokens"`
					OutputTokens int  `json:"output_tokens"`
				} `json:"usage"`
			}
			if json.Unmarshal([]byte(data), &ev) != nil {
				continue
			}
			switch ev.Type {
			case "message_start":
				usage = Usage{ev.Message.Usage.InputTokens, ev.Message.Usage.OutputTokens}
			case "content_block_start":
				b := &block{typ: ev.ContentBlock.Type, call: ToolCall{ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name, Input: ev.ContentBlock.Input}}
				r.Text += ev.ContentBlock.Text
				blocks = append(blocks, b)
			case "content_block_delta":
				if ev.Index < 0 || ev.Index >= len(blocks) {
					continue
				}
				switch ev.Delta.Type {
				case "text_delta":
					r.Text += ev.Delta.Text
				case "input_json_delta":
					blocks[ev.Index].input.WriteString(ev.Delta.PartialJSON)
				}
			case "message_delta":
				r.StopReason = ev.Delta.StopReason
				usage.OutputTokens = ev.Usage.OutputTokens
				if ev.Usage.InputTokens != nil {
					usage.InputTokens = *ev.Usage.InputTokens
				}
			}
		}
		for _, b := range blocks {
			if b.typ != "tool_use" {
				continue
			}
			if b.input.Len() > 0 {
				b.call.Input = json.RawMessage(b.input.String())
			}
			b.call.Input = objectOrNil(b.call.Input)
			r.ToolCalls = append(r.ToolCalls, b.call)
		}
		r.Usage = &usage
	case ChatCompletions:
		var calls []*ToolCall
		var args []*strings.Builder
		var text strings.Builder
		for _, e := range events {
			_, data := parseEvent(e)
			var ch struct {
				Choices []struct {
					Delta struct {
						Content   string         `json:"content"`
						ToolCalls []chatToolCall `json:"tool_calls"`
					} `json:"delta"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage *chatUsage `json:"usage"`
			}
			if json.Unmarshal([]byte(data), &ch) != nil {
				continue // [DONE]
			}
			if ch.Usage != nil {
				r.Usage = &Usage{ch.Usage.PromptTokens, ch.Usage.CompletionTokens}
			}
			if len(ch.Choices) == 0 {
				continue
			}
			c := ch.Choices[0]
			text.WriteString(c.Delta.Content)
			if c.FinishReason != "" {
				r.StopReason = c.FinishReason
			}
			for _, tc := range c.Delta.ToolCalls {
				i := 0
				if tc.Index != nil {
					i = *tc.Index
				}
				if i < 0 || i > len(calls) {
					continue
				}
				if i == len(calls) {
					calls = append(calls, &ToolCall{})
					args = append(args, &strings.Builder{})
				}
				if tc.ID != "" {
					calls[i].ID = tc.ID
				}
				if tc.Function.Name != "" {
					calls[i].Name = tc.Function.Name
				}
				if tc.Function.Arguments != nil {
					args[i].WriteString(*tc.Function.Arguments)
				}
			}
		}
		r.Text = text.String()
		for i, c := range calls {
			c.Input = objectOrNil(json.RawMessage(args[i].String()))
			r.ToolCalls = append(r.ToolCalls, *c)
		}
	case Responses:
		for _, e := range events {
			name, data := parseEvent(e)
			if name != "response.completed" && name != "response.incomplete" && name != "response.failed" {
				continue
			}
			var ev struct {
				Response json.RawMessage `json:"response"`
			}
			if json.Unmarshal([]byte(data), &ev) == nil {
				readResponse(r, ev.Response)
			}
		}
	case Gemini:
		docs := make([][]byte, len(events))
		for i, e := range events {
			_, data := parseEvent(e)
			docs[i] = []byte(data)
		}
		readGemini(r, docs)
	}
	return r
}

package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// DefaultOutcome starts the outcome of a request the Responder answered by
// its fixed rule rather than from the script (Journaled.Default): the
// models list, a token count, or an answer to a path that is not a model
// endpoint (see ServeHTTP).
const DefaultOutcome = "default: "

// modelTails are the last segments of the model APIs' paths: a POST to a
// path ending in one of them is a model request under another prefix (a
// base URL that is off), never a quiet default.
var modelTails = []string{"/messages", "/completions", "/responses", ":" + geminiGenerate, ":" + geminiStream}

// The creation time the models list gives every model: 2025-01-01, UTC.
const (
	modelsCreated     = "2025-01-01T00:00:00Z"
	modelsCreatedUnix = 1735689600
)

// isModelRequest reports whether a request the script does not answer is
// nonetheless for a model, so that it gets an error the user sees (ServeHTTP
// has the rule): a path at or under a model API's path, a POST to a path
// ending like one, or a POST whose body is a JSON object naming a model.
func isModelRequest(method, path string, body []byte) bool {
	for _, p := range modelPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	if method != http.MethodPost {
		return false
	}
	if _, _, ok := geminiPath(path); ok {
		return true // a Gemini method the mock does not answer
	}
	for _, t := range modelTails {
		if strings.HasSuffix(path, t) {
			return true
		}
	}
	return namesModel(body)
}

// modelPaths are the model APIs' paths (dialectOf's).
var modelPaths = []string{"/v1/messages", "/v1/chat/completions", "/v1/responses"}

// namesModel reports whether body is a JSON object whose "model" is a
// string that is not empty, as every model API's request has.
func namesModel(body []byte) bool {
	if !bytes.Contains(body, []byte(`"model"`)) {
		return false
	}
	var b struct {
		Model any `json:"model"`
	}
	if json.Unmarshal(body, &b) != nil {
		return false
	}
	s, ok := b.Model.(string)
	return ok && s != ""
}

// errorDialect is the dialect whose error shape answers a request at a
// path that names none: Anthropic's when the request has an
// anthropic-version header, Gemini's when it is for the Gemini API (a
// path under /v1beta/ or /v1alpha/, or a key in x-goog-api-key or ?key=),
// OpenAI's otherwise.
func errorDialect(hr *http.Request) Dialect {
	if hr.Header.Get("anthropic-version") != "" {
		return Anthropic
	}
	if isGeminiRequest(hr) {
		return Gemini
	}
	return Responses
}

// serveDefault answers a request that the script does not answer and that
// is not a model request (see ServeHTTP for the rule), and reports whether
// it did: false leaves the request to Serve.
func (r *Responder) serveDefault(w http.ResponseWriter, hr *http.Request, decided func(Journaled), j *Journaled, body []byte) bool {
	method, path := hr.Method, hr.URL.Path
	var a *answer
	var outcome string
	switch {
	case path == "/v1/messages/count_tokens" && method == http.MethodPost:
		j.Dialect = Anthropic
		req, err := parseRequest(Anthropic, path, body)
		if err != nil {
			r.unmatched(w, hr, decided, j, body, Anthropic, http.StatusBadRequest, err.Error(), "sbx mock LLM: "+err.Error())
			return true
		}
		j.Model = req.model
		n := max(1, (len(body)+3)/4) // as a reply's estimated usage
		a = newAnswer(http.StatusOK, contentJSON, false)
		a.pieces = [][]byte{marshal(struct {
			InputTokens int `json:"input_tokens"`
		}{n})}
		outcome = fmt.Sprintf("count_tokens estimated %d input tokens", n)
	case method == http.MethodPost && isGeminiCount(path):
		j.Dialect = Gemini
		req, err := parseRequest(Gemini, path, body)
		if err != nil {
			r.unmatched(w, hr, decided, j, body, Gemini, http.StatusBadRequest, err.Error(), "sbx mock LLM: "+err.Error())
			return true
		}
		j.Model = req.model
		n := max(1, (len(body)+3)/4)
		a = newAnswer(http.StatusOK, contentJSON, false)
		a.pieces = [][]byte{geminiCountBody(n)}
		outcome = fmt.Sprintf("countTokens estimated %d tokens", n)
	case method == http.MethodGet && isGeminiModels(path):
		models := r.models()
		a = newAnswer(http.StatusOK, contentJSON, false)
		a.pieces = [][]byte{geminiModelsBody(models)}
		outcome = fmt.Sprintf("the models the script names (%d)", len(models))
	case method == http.MethodGet && isGeminiModel(hr):
		model, _, _ := geminiPath(path)
		j.Dialect, j.Model = Gemini, model
		a = newAnswer(http.StatusOK, contentJSON, false)
		a.pieces = [][]byte{marshal(newGeminiModel(model))}
		outcome = "the model " + model
	case path == "/v1/models" && method == http.MethodGet:
		models := r.models()
		a = newAnswer(http.StatusOK, contentJSON, false)
		a.pieces = [][]byte{modelsBody(errorDialect(hr), models)}
		outcome = fmt.Sprintf("the models the script names (%d)", len(models))
	case isModelRequest(method, path, body):
		return false
	case method == http.MethodGet || method == http.MethodHead:
		msg := fmt.Sprintf("sbx mock LLM: nothing at %s %s: the mock answers model requests, and a read of any other path is not found", method, path)
		a = errorAnswer(errorDialect(hr), http.StatusNotFound, msg)
		a.header.Set("x-should-retry", "false")
		outcome = "not a model endpoint: 404"
	default:
		a = newAnswer(http.StatusOK, contentJSON, false)
		a.pieces = [][]byte{[]byte("{}")}
		outcome = "not a model endpoint: 200 {}"
	}
	j.Default, j.Status, j.Outcome = true, a.status, DefaultOutcome+outcome
	r.mu.Lock()
	r.record(j, body)
	r.mu.Unlock()
	if decided != nil {
		entry := *j
		entry.Body = nil
		decided(entry)
	}
	send(w, hr, a, nil, nil)
	return true
}

// models returns the models the turns match (Match.Model), the script's
// then those queued, each once, in order.
func (r *Responder) models() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.turns {
		if m := e.turn.Match; m != nil && m.Model != "" && !slices.Contains(out, m.Model) {
			out = append(out, m.Model)
		}
	}
	return out
}

// modelsBody is the answer of GET /v1/models listing models, in
// Anthropic's shape, Gemini's or OpenAI's.
func modelsBody(d Dialect, models []string) []byte {
	if d == Gemini {
		return geminiModelsBody(models)
	}
	if d == Anthropic {
		type model struct {
			Type        string `json:"type"`
			ID          string `json:"id"`
			DisplayName string `json:"display_name"`
			CreatedAt   string `json:"created_at"`
		}
		list := struct {
			Data    []model `json:"data"`
			HasMore bool    `json:"has_more"`
			FirstID *string `json:"first_id"`
			LastID  *string `json:"last_id"`
		}{Data: []model{}}
		for _, m := range models {
			list.Data = append(list.Data, model{"model", m, m, modelsCreated})
		}
		if len(models) > 0 {
			list.FirstID, list.LastID = &models[0], &models[len(models)-1]
		}
		return marshal(list)
	}
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, m := range models {
		list.Data = append(list.Data, model{m, "model", modelsCreatedUnix, "sbx-mock"})
	}
	return marshal(list)
}

// Package mockllm is a scripted LLM API for testing agents (docs/mock-llm.md):
// a Responder answers the Anthropic Messages, OpenAI Chat Completions,
// OpenAI Responses and Gemini APIs from a Script of turns, in each API's
// own JSON and event-stream shapes, and a Recorder turns real exchanges
// into a script that replays offline.
//
// A script is YAML (or JSON), decoded strictly: an unknown field, a string
// where a number belongs or a turn with neither reply nor fault is an
// error naming the file, the line and the fix.
//
//	turns:
//	  - match: {model: claude-sonnet-4-5, user: "list the files"}
//	    reply:
//	      text: "Let me look."
//	      tool_calls:
//	        - {name: bash, input: {command: "ls"}}
//	  - match: {tool_result: bash}
//	    reply: {text: "There are three files.", usage: {input_tokens: 120, output_tokens: 9}}
//	  - fault: {status: 429, headers: {retry-after: "1"}}
//	  - fault: {disconnect_after_events: 3}
//
// Fields documents every field of the format (sbx mock --help and
// docs/mock-llm.md list it). A tool call with custom: TEXT in place of
// input calls a custom tool of the Responses API (a custom_tool_call),
// which the other APIs do not have (CheckAPI).
//
// The Gemini API names the model in the path
// (/v1beta/models/MODEL:generateContent, :streamGenerateContent answered
// as SSE, :countTokens, GET /v1beta/models); its function calls are
// functionCall parts and their results functionResponse parts, matched by
// the function's name (gemini.go).
//
// The Responses API's WebSocket mode (GET /v1/responses upgraded, which
// the Codex CLI tries first) is served from the same script: each
// response.create message is a request (see Responder.ServeHTTP).
//
// Each request takes the first turn not used up whose match fits it (a turn
// without match fits any); a turn answers Times requests, one by default,
// or every request it fits (Unlimited; Warnings names the turns after it
// that can then never answer).
// Runtime control is for the gateway's management API: Expect queues turns
// after the script's, Requests is the journal of what the agent sent (the
// only place request bodies are kept), Reset starts over. A request no turn
// answers gets an API error and OnUnmatched hears of it; a request that is
// not for a model (an agent's settings, feature flags, telemetry) gets a
// fixed answer instead, by a rule on its method, path and body (see
// Responder.ServeHTTP). A JournalFile keeps the journals of Responders in
// a file too (Responder.Journal), as requests arrive, and ReadJournal
// reads it back after they are gone.
//
// The package imports no other sbx package but netpolicy/strictyaml, the
// strict decoder it shares with policy files, so the gateway can mount a
// Responder for a host, and tests can serve one from httptest; its
// WebSockets are github.com/coder/websocket's.
package mockllm

// Package login keeps an agent's subscription login outside the sandbox
// (docs/login.md): sbx reads the agent's credential file on the host, the
// sandbox gets a copy of the same shape whose tokens are placeholders,
// the gateway puts the real access token in the agent's API requests
// (through gateway/secrets, under its rules: only the Authorization
// header, only on TLS to the agent's API hosts whose certificate the
// gateway verified, the answers scrubbed), and, when the agent asks the
// token endpoint for a refresh with its placeholder refresh token, the
// gateway refreshes with the real one itself, writes the new tokens back
// to the host file and answers the agent with placeholders. The real
// refresh token never enters the sandbox, and the access token goes to
// no host but the agent's API hosts.
//
// The formats and flows, as the published packages have them:
//
// Claude Code (npm @anthropic-ai/claude-code: cli.js of 1.0.35, and the
// strings of 2.1.332's native binary): the login is
// ~/.claude/.credentials.json, mode 0600,
//
//	{"claudeAiOauth": {"accessToken": "sk-ant-oat01-...", "refreshToken": "sk-ant-ort01-...",
//	  "expiresAt": 1748276587173, "scopes": ["user:inference", "user:profile"],
//	  "subscriptionType": "max"}}
//
// expiresAt in milliseconds. The access token is sent as
// "Authorization: Bearer" to https://api.anthropic.com (the Messages API,
// and /api/oauth/profile, /api/oauth/claude_cli/roles). Five minutes
// before expiresAt the CLI POSTs to its TOKEN_URL,
// https://platform.claude.com/v1/oauth/token (2.1.332;
// https://console.anthropic.com/v1/oauth/token in 1.0.35), the JSON
// {"grant_type": "refresh_token", "refresh_token": ..., "client_id":
// "9d1c250a-e61b-44d9-88ed-5944d1962f5e"} (2.1.332 adds "scope", the
// scopes joined by spaces, and may add "expires_in") and takes access_token,
// refresh_token (the old one when absent), expires_in (seconds) and scope
// (space separated) from the answer.
//
// Codex (npm @openai/codex 0.171.0-linux-x64, the native binary's
// strings; the TypeScript CLI of 0.1.2505291658 for the shape): the login
// is ~/.codex/auth.json, mode 0600,
//
//	{"OPENAI_API_KEY": null, "tokens": {"id_token": "<JWT>", "access_token": "<JWT>",
//	  "refresh_token": "...", "account_id": "..."}, "last_refresh": "2025-06-01T10:00:00Z"}
//
// (newer files add "auth_mode"). The access token goes as "Authorization:
// Bearer" to https://chatgpt.com/backend-api/codex, an API key to
// https://api.openai.com. The CLI reads the id token's claims (plan,
// account) but checks no signature. Refreshing, it POSTs to
// https://auth.openai.com/oauth/token the JSON {"client_id":
// "app_EMoamEEZ73f0CkXaXp7hrann", "grant_type": "refresh_token",
// "refresh_token": ..., "scope": "openid profile email"} and takes
// id_token, access_token and refresh_token from the answer, each when
// present; refresh tokens rotate (a used one answers 401
// {"error": {"code": "refresh_token_reused", ...}}).
//
// A token endpoint refuses a bad refresh token as OAuth 2.0 says
// (RFC 6749 §5.2): status 400 and {"error": "invalid_grant",
// "error_description": ...}; the gateway hands such an answer to the
// agent as it came, any real token in it replaced by its placeholder,
// and the agent asks its user to log in again.
//
// A Login is made by Read (the host file, opened without following a
// link below the home, owned by the user) or Parse (its bytes). Copy is
// the sandbox's copy, Secrets the access token (and Codex's API key) as
// secrets for the gateway's secrets.Set, and Refresher the round tripper
// the gateway puts before a request to the token endpoint inside an
// inspected tunnel.
package login

// A stand-in coding agent for the README (docs/examples, "Testing an agent
// against a scripted model"): it asks the model what to do,
// runs the bash tool calls the model makes, and sends the results back
// until the model answers in text. It uses the official Anthropic SDK,
// unmodified, against the real API hostname.
const Anthropic = require("@anthropic-ai/sdk");
const { execSync } = require("child_process");
(async () => {
  const client = new Anthropic({ apiKey: process.env.ANTHROPIC_API_KEY || "sk-test" });
  const tools = [{ name: "bash", description: "run a shell command", input_schema: { type: "object", properties: { command: { type: "string" } } } }];
  const messages = [{ role: "user", content: process.argv[2] }];
  for (;;) {
    const m = await client.messages.create({ model: "scripted-model", max_tokens: 1024, tools, messages });
    messages.push({ role: "assistant", content: m.content });
    const calls = m.content.filter(b => b.type === "tool_use");
    for (const b of m.content) if (b.type === "text") console.log("agent: " + b.text);
    if (m.stop_reason !== "tool_use") break;
    const results = calls.map(c => {
      let out;
      try { out = execSync(c.input.command, { encoding: "utf8", timeout: 10000 }); } catch (e) { out = String(e.stdout || e.message); }
      console.log("tool: $ " + c.input.command + "\n" + out.trim());
      return { type: "tool_result", tool_use_id: c.id, content: out };
    });
    messages.push({ role: "user", content: results });
  }
})().catch(e => { console.error("agent failed: " + e); process.exit(1); });

// Drives a running `weft serve` with LangGraph's JavaScript SDK (`@langchain/langgraph-sdk`,
// pinned in scripts/setup-clients), as a Node application would.
//
//   node langgraph_client.mjs URL KEY WORKDIR      (WEFT_TEST_JS_CLIENTS: the node_modules dir)
//
// The agent is `banker`, which `crates/weft/tests/it/jssdk.rs` writes into WORKDIR: it reads a
// balance (a tool call), asks before a transfer (a tool that needs approval: an interrupt), and
// answers. Each check prints `ok: NAME`; the first failed assertion ends the script (exit 1).
import { createRequire } from "node:module";
import { strict as assert } from "node:assert";
import { readFileSync, existsSync } from "node:fs";
import { join } from "node:path";

const require = createRequire(join(process.env.WEFT_TEST_JS_CLIENTS, "/"));
const { Client } = require("@langchain/langgraph-sdk");
const [URL, KEY, WORK] = process.argv.slice(2);

const ok = (name) => console.log(`ok: ${name}`);
const client = new Client({ apiUrl: URL, apiKey: KEY });
const ask = { messages: [{ role: "user", content: "Move 10 to savings" }] };
const APPROVAL = "Allow the call transfer";
const ANSWER = "Moved 10 to savings; the balance was 120.";

async function collect(stream) {
  const parts = [];
  for await (const p of stream) parts.push(p);
  return parts;
}

const transfers = () =>
  existsSync(join(WORK, "transfer.log"))
    ? readFileSync(join(WORK, "transfer.log"), "utf8").trim().split("\n").filter(Boolean)
    : [];

// The assistant is the agent file, found by its name.
const found = await client.assistants.search();
assert.deepEqual(found.map((a) => a.assistant_id), ["banker"]);
ok("assistants.search");

// threads.create, then a stream in three modes up to the interrupt.
const thread = await client.threads.create({ metadata: { from: "js" } });
assert.equal(thread.status, "idle");
let created;
const first = await collect(
  client.runs.stream(thread.thread_id, "banker", {
    input: ask,
    streamMode: ["values", "messages-tuple", "updates"],
    onRunCreated: (m) => (created = m),
  }),
);
const events = first.map((p) => p.event);
assert.equal(events[0], "metadata", events.join());
assert.ok(created && created.thread_id === thread.thread_id, JSON.stringify(created));
assert.equal(first[0].data.run_id, created.run_id);
// The model wrote no text before the interrupt (only tool calls, which are in values and
// updates), so there are no `messages` parts yet: the answer's come after the resume.
const kinds = new Set(events.filter((e) => e !== "metadata" && e !== "end"));
assert.deepEqual([...kinds].sort(), ["updates", "values"], events.join());
assert.equal(events.at(-1), "end", events.join());
const ids = first.filter((p) => p.event !== "metadata" && p.event !== "end").map((p) => p.id);
assert.ok(ids.every(Boolean) && new Set(ids).size === ids.length, `ids: ${ids}`);
ok("runs.stream in values, messages-tuple and updates");

// The balance tool's call and result are in values.messages: an ai message with tool_calls,
// a tool message naming the call.
const values = first.filter((p) => p.event === "values").map((p) => p.data);
const last = values.at(-1);
const types = last.messages.map((m) => m.type);
assert.deepEqual(types.slice(0, 3), ["human", "ai", "tool"], types.join());
const call = last.messages[1].tool_calls[0];
assert.equal(call.name, "balance");
const result = last.messages[2];
assert.equal(result.tool_call_id, call.id);
assert.deepEqual(JSON.parse(result.content), { balance: 120 });
assert.ok(
  last.messages.some((m) => m.type === "ai" && m.tool_calls?.[0]?.name === "transfer"),
  JSON.stringify(last.messages),
);
const updates = first.filter((p) => p.event === "updates").map((p) => p.data);
assert.ok(
  updates.some((u) => u.tools?.messages?.[0]?.name === "balance"),
  JSON.stringify(updates),
);
ok("the tool call and its result in values.messages and updates");

// The transfer waits for a person: an interrupt, in the stream and on the thread.
const intr = last.__interrupt__?.[0];
assert.ok(intr, JSON.stringify(last));
assert.equal(intr.value.kind, "tool_approval");
assert.equal(intr.value.tool, "transfer");
assert.ok(intr.value.question.startsWith(APPROVAL), intr.value.question);
assert.ok(updates.some((u) => u.__interrupt__?.[0]?.id === intr.id), JSON.stringify(updates));
assert.deepEqual(transfers(), [], "the transfer ran before it was approved");
const waiting = await client.threads.get(thread.thread_id);
assert.equal(waiting.status, "interrupted");
const state = await client.threads.getState(thread.thread_id);
assert.equal(state.tasks[0].interrupts[0].value.tool, "transfer");
ok("the interrupt: its question in the stream, the thread interrupted");

// Resume with command: {resume}; the answer streams in pieces that carry its message's id.
const second = await collect(
  client.runs.stream(thread.thread_id, "banker", {
    command: { resume: "approve" },
    streamMode: ["values", "messages-tuple"],
  }),
);
const pieces = second.filter((p) => p.event === "messages").map((p) => p.data[0]);
assert.ok(pieces.length >= 2, JSON.stringify(pieces));
assert.equal(pieces.map((m) => m.content).join(""), ANSWER);
assert.equal(new Set(pieces.map((m) => m.id)).size, 1, JSON.stringify(pieces));
const end = second.filter((p) => p.event === "values").at(-1).data;
assert.equal(end.messages.at(-1).content, ANSWER);
assert.equal(end.messages.at(-1).id, pieces[0].id);
assert.equal(end.__interrupt__, undefined);
const moved = end.messages.find((m) => m.type === "tool" && m.name === "transfer");
assert.deepEqual(JSON.parse(moved.content), { moved: 10 });
assert.equal(transfers().length, 1);
assert.equal((await client.threads.get(thread.thread_id)).status, "idle");
ok("resumed with command resume: the transfer ran once and the answer streamed");

// runs.wait: up to the interrupt, then the resume's final values.
const t2 = await client.threads.create();
const waited = await client.runs.wait(t2.thread_id, "banker", { input: ask });
assert.equal(waited.__interrupt__[0].value.tool, "transfer");
const done = await client.runs.wait(t2.thread_id, "banker", { command: { resume: "approve" } });
assert.equal(done.messages.at(-1).content, ANSWER);
assert.equal(transfers().length, 2);
ok("runs.wait with an interrupt and command resume");

// A reconnect: joinStream of a finished run with the id of a part seen sends what followed.
const runs = await client.runs.list(thread.thread_id);
assert.equal(runs.length, 2, JSON.stringify(runs));
const body = first.filter((p) => p.event !== "metadata" && p.event !== "end");
const cut = Math.floor(body.length / 2);
const rest = await collect(
  client.runs.joinStream(thread.thread_id, created.run_id, {
    lastEventId: body[cut].id,
    streamMode: ["values", "messages-tuple", "updates"],
  }),
);
const restIds = rest.filter((p) => p.event !== "end" && p.id).map((p) => p.id);
assert.deepEqual(restIds, ids.slice(cut + 1));
ok("joinStream with lastEventId sends what followed");

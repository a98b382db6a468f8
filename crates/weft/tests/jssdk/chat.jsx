// A chat page on LangGraph's React hook `useStream` (`@langchain/langgraph-sdk/react`) against
// `weft serve`, bundled with esbuild by `crates/weft/tests/it/jssdk.rs` and served from another
// origin than the API's (so it needs `weft serve --cors-origin`).
//
// index.html?api=URL&key=KEY&assistant=ID. It shows the conversation as it streams (the model's
// tool calls and their results included), the interrupt's question with a button that approves
// it, and the hook's error. `window.weftSeen` lists each text the last AI message showed, so a
// test can tell that the answer arrived in pieces.
import { useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/langgraph-sdk/react";

const params = new URLSearchParams(window.location.search);
window.weftSeen = [];

function text(content) {
  if (typeof content === "string") return content;
  return (content ?? []).map((c) => (c.type === "text" ? c.text : "")).join("");
}

function Message({ m }) {
  if (m.type === "tool") {
    return (
      <li className="tool-result" data-tool={m.name}>
        {m.name} returned {text(m.content)}
      </li>
    );
  }
  return (
    <li className={m.type}>
      <b>{m.type === "human" ? "you" : "agent"}:</b> {text(m.content)}
      {(m.tool_calls ?? []).map((c) => (
        <div key={c.id} className="tool-call" data-tool={c.name}>
          calls {c.name}({JSON.stringify(c.args)})
        </div>
      ))}
    </li>
  );
}

function Chat() {
  const [draft, setDraft] = useState("");
  const stream = useStream({
    apiUrl: params.get("api"),
    apiKey: params.get("key"),
    assistantId: params.get("assistant"),
    messagesKey: "messages",
  });
  const messages = stream.messages;
  const lastAi = messages.filter((m) => m.type === "ai").at(-1);
  const shown = lastAi ? text(lastAi.content) : "";
  if (shown && window.weftSeen.at(-1) !== shown) window.weftSeen.push(shown);
  const interrupt = stream.interrupt;
  return (
    <main>
      <ul id="messages">
        {messages.map((m, i) => (
          <Message key={m.id ?? i} m={m} />
        ))}
      </ul>
      {interrupt?.value && (
        <div id="interrupt">
          <p id="question">{interrupt.value.question}</p>
          <button
            id="approve"
            onClick={() => stream.submit(undefined, { command: { resume: "approve" } })}
          >
            Approve
          </button>
        </div>
      )}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          stream.submit({ messages: [{ type: "human", content: draft }] });
          setDraft("");
        }}
      >
        <input id="draft" value={draft} onChange={(e) => setDraft(e.target.value)} />
        <button id="send" type="submit" disabled={stream.isLoading}>
          Send
        </button>
      </form>
      <p id="status">{stream.isLoading ? "streaming" : "idle"}</p>
      {stream.error != null && <p id="error">{String(stream.error?.message ?? stream.error)}</p>}
    </main>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);

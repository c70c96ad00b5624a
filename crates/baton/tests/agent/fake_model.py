"""A fake model server for driving the real Claude Code and Codex TUIs in tests
(crates/baton/tests/real_agents.rs). Python 3 standard library only.

It speaks just enough of two wire formats:
- Anthropic Messages: POST /v1/messages (SSE: message_start, content_block_start/delta/stop,
  message_delta, message_stop); the shell tool is a `tool_use` block named `Bash`
  with {"command": ...} (and optionally "run_in_background": true).
- OpenAI Responses: POST /v1/responses (SSE: response.created, response.output_item.added/done,
  response.output_text.delta, response.completed); the shell tool is a `function_call` named
  `exec_command` with {"cmd": ...}.

Usage: fake_model.py SCRIPT.json PORT_FILE LOG_FILE

SCRIPT.json: {"steps": [{"when": "MARKER", "command": "...", "background": false}, ...]}.
When the latest user turn (the new user text and tool results, not the history) of a request that
offers tools contains MARKER, the answer is a call of the shell tool running COMMAND. Each step
answers once. Everything else gets a short text answer ("noted").

LOG_FILE gets one JSON line per request: {"time": unix ms (float), "path", "tools": bool,
"latest": the latest user turn's text, "step": index of the scripted step it answered or null}.
The port (bound on 127.0.0.1:0) is written to PORT_FILE once the server listens.
"""
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

script_path, port_file, log_path = sys.argv[1:4]
with open(script_path) as f:
    STEPS = json.load(f)["steps"]
used = set()
lock = threading.Lock()


def text_of(content):
    """The text in a message's content: a string, or a list of blocks (text, tool results)."""
    if isinstance(content, str):
        return content
    parts = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        for key in ("text", "output"):
            if isinstance(block.get(key), str):
                parts.append(block[key])
        if "content" in block:  # tool_result blocks and Responses messages nest their content
            parts.append(text_of(block["content"]))
    return "\n".join(p for p in parts if p)


def latest_anthropic(body):
    """The messages after the model's last answer: new user text and tool results, and the
    `system` messages Claude Code puts in between (a message that came in during a tool call)."""
    tail = []
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "assistant":
            break
        tail.append(text_of(message.get("content")))
    return "\n".join(reversed(tail))


def latest_responses(body):
    """The trailing run of input items that are user messages or tool outputs."""
    items = body.get("input")
    if isinstance(items, str):
        return items
    tail = []
    for item in reversed(items or []):
        kind = item.get("type", "message")
        if kind == "function_call_output" or (kind == "message" and item.get("role") == "user"):
            tail.append(item)
        else:
            break
    return "\n".join(text_of([item]) for item in reversed(tail))


def pick_step(latest, has_tools):
    """The first unused scripted step whose marker is in the latest user turn."""
    if not has_tools:
        return None
    with lock:
        for i, step in enumerate(STEPS):
            if i not in used and step["when"] in latest:
                used.add(i)
                return i
    return None


def log(entry):
    with lock, open(log_path, "a") as f:
        f.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):
        # Probes (model lists, health checks): harmless empty answers.
        self.reply(200, {"data": [], "models": []})

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        path = self.path.split("?")[0]
        if path.endswith("/count_tokens"):
            return self.reply(200, {"input_tokens": 10})
        has_tools = bool(body.get("tools"))
        if path.endswith("/messages"):
            latest = latest_anthropic(body)
        elif path.endswith("/responses"):
            latest = latest_responses(body)
        else:
            log({"time": time.time() * 1000, "path": self.path, "tools": has_tools,
                 "latest": "", "step": None})
            return self.reply(404, {"error": {"type": "not_found", "message": path}})
        step = pick_step(latest, has_tools)
        log({"time": time.time() * 1000, "path": self.path, "tools": has_tools,
             "latest": latest, "step": step})
        command = STEPS[step] if step is not None else None
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        if path.endswith("/messages"):
            self.stream_messages(body, command)
        else:
            self.stream_responses(body, command)
        self.wfile.flush()

    def sse(self, event, data):
        self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())

    def stream_messages(self, body, step):
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        usage = {"input_tokens": 10, "output_tokens": 1}
        self.sse("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": body.get("model", "m"),
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}})
        if step is None:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": "noted"}
            stop = "end_turn"
        else:
            tool_input = {"command": step["command"], "description": "run the scripted command"}
            if step.get("background"):
                tool_input["run_in_background"] = True
            block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20], "name": "Bash",
                     "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(tool_input)}
            stop = "tool_use"
        self.sse("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": block})
        self.sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        self.sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        self.sse("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": 5}})
        self.sse("message_stop", {"type": "message_stop"})

    def stream_responses(self, body, step):
        resp_id = "resp_" + uuid.uuid4().hex[:24]
        base = {"id": resp_id, "object": "response", "created_at": int(time.time()),
                "model": body.get("model", "m"), "status": "in_progress", "output": []}
        self.sse("response.created", {"type": "response.created", "response": base})
        if step is None:
            item_id = "msg_" + uuid.uuid4().hex[:24]
            item = {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "noted", "annotations": []}]}
            added = dict(item, status="in_progress", content=[])
            self.sse("response.output_item.added", {"type": "response.output_item.added",
                                                    "output_index": 0, "item": added})
            self.sse("response.output_text.delta", {"type": "response.output_text.delta",
                                                    "item_id": item_id, "output_index": 0,
                                                    "content_index": 0, "delta": "noted"})
        else:
            item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:24],
                    "call_id": "call_" + uuid.uuid4().hex[:24], "name": "exec_command",
                    "arguments": json.dumps({"cmd": step["command"]}), "status": "completed"}
            self.sse("response.output_item.added", {"type": "response.output_item.added",
                                                    "output_index": 0, "item": item})
        self.sse("response.output_item.done", {"type": "response.output_item.done",
                                               "output_index": 0, "item": item})
        done = dict(base, status="completed", output=[item],
                    usage={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                           "input_tokens_details": {"cached_tokens": 0},
                           "output_tokens_details": {"reasoning_tokens": 0}})
        self.sse("response.completed", {"type": "response.completed", "response": done})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
tmp = port_file + ".tmp"
with open(tmp, "w") as f:
    f.write(str(server.server_address[1]))
os.rename(tmp, port_file)
server.serve_forever()

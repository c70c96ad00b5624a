"""A real MCP client (the official Python SDK) driving `baton mcp` over stdio, for tests/mcp.rs.

Runs one scenario and prints one JSON object with what it saw; the Rust test asserts on it.
Usage: client.py BATON_BINARY WORKDIR
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def attr(obj, snake, camel):
    """SDK 2.x names fields in snake_case; 1.x used the protocol's camelCase."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


def result_of(r):
    text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
    return {"is_error": bool(attr(r, "is_error", "isError")), "text": text,
            "json": attr(r, "structured_content", "structuredContent")}


async def main(baton, workdir):
    params = StdioServerParameters(command=baton, args=["mcp"], env=dict(os.environ), cwd=workdir)
    seen = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["server"] = attr(init, "server_info", "serverInfo").name
            seen["instructions"] = init.instructions
            tools = await session.list_tools()
            seen["tools"] = {t.name: {"description": t.description, "schema": attr(t, "input_schema", "inputSchema")} for t in tools.tools}

            async def call(name, args):
                return result_of(await session.call_tool(name, args))

            seen["submit"] = await call("submit_job", {
                "command": ["sh", "-c", "echo 'step=10 loss=0.25'; echo done > out.txt"],
                "name": "mcp-job", "time_limit": "5m",
            })
            job = seen["submit"]["json"]["id"]
            seen["wait"] = await call("wait_for_jobs", {"ids": [job], "timeout_seconds": 30})
            seen["report"] = await call("job_report", {"id": job})
            seen["status"] = await call("job_status", {"id": job})
            seen["logs"] = await call("job_logs", {"id": job, "tail": 5})
            seen["list_mine"] = await call("list_jobs", {"mine": True})
            seen["gpus"] = await call("gpu_status", {})
            seen["workflow"] = await call("submit_workflow", {"yaml": "name: mcp-flow\ntasks:\n  a: {command: \"echo a\"}\n  b: {command: \"echo b\", after: [a]}\n"})
            wf_jobs = [t["job"]["id"] for t in seen["workflow"]["json"]["tasks"]]
            seen["workflow_wait"] = await call("wait_for_jobs", {"ids": wf_jobs, "timeout_seconds": 30})

            # A sweep: one comparison report for all its runs; an array through submit_job.
            seen["sweep"] = await call("submit_sweep", {
                "command": ["sh", "-c", "echo 'epoch 1 val_acc=0.{lr}{bs}'"],
                "sweep": ["lr=1,2", "bs=3,4"], "max_parallel": 2, "rank_by": "val_acc",
                "notify": ["file:" + os.path.join(workdir, "sweep-inbox.md")],
            })
            sweep = seen["sweep"]["json"]["id"]
            seen["sweep_wait"] = await call("wait_for_jobs", {"ids": seen["sweep"]["json"]["jobs"], "timeout_seconds": 30})
            seen["sweep_status"] = await call("sweep_status", {"id": sweep})
            seen["array"] = await call("submit_job", {"command": ["sh", "-c", "echo {index}"], "array": "0-3%2"})
            seen["bad_sweep"] = {
                "placeholder": await call("submit_sweep", {"command": ["echo", "{typo}"], "sweep": ["lr=1,2"]}),
                "neither": await call("submit_sweep", {"command": ["true"]}),
                "unknown_field": await call("submit_sweep", {"command": ["true"], "sweep": ["a=1"], "colour": "red"}),
                "bad_array": await call("submit_job", {"command": ["true"], "array": "9-1"}),
                "no_such_sweep": await call("sweep_status", {"id": 999}),
            }

            sleeper = await call("submit_job", {"command": ["sleep", "300"], "gpus": 1})
            seen["cancel"] = await call("cancel_job", {"id": sleeper["json"]["id"]})
            seen["wait_cancelled"] = await call("wait_for_jobs", {"ids": [sleeper["json"]["id"]], "timeout_seconds": 30})
            seen["short_wait"] = await call("wait_for_jobs", {"ids": [(await call("submit_job", {"command": ["sleep", "30"]}))["json"]["id"]], "timeout_seconds": 1})

            # A longer wait tells the client it is alive: progress notifications meanwhile.
            progress = []

            async def on_progress(value, total, message):
                progress.append({"progress": value, "total": total, "message": message})

            sleeper = (await call("submit_job", {"command": ["sleep", "30"]}))["json"]["id"]
            waited = await session.call_tool("wait_for_jobs", {"ids": [sleeper], "timeout_seconds": 4},
                                             read_timeout_seconds=60, progress_callback=on_progress)
            seen["progress_wait"] = result_of(waited)
            seen["progress"] = progress

            # Malformed calls: each must come back as a tool error, and the server must live on.
            seen["bad"] = {
                "missing_command": await call("submit_job", {"gpus": 1}),
                "wrong_type": await call("job_status", {"id": "seven"}),
                "unknown_field": await call("job_report", {"id": job, "verbose": True}),
                "too_many_gpus": await call("submit_job", {"command": ["true"], "gpus": 99}),
                "bad_duration": await call("submit_job", {"command": ["true"], "time_limit": "soon"}),
                "no_such_job": await call("job_report", {"id": 9999}),
                "bad_state": await call("list_jobs", {"state": "sleeping"}),
                "bad_workflow": await call("submit_workflow", {"yaml": "name: x\ntasks:\n  a: {command: \"true\", after: [a]}\n"}),
                "workflow_both": await call("submit_workflow", {"yaml": "x", "path": "y"}),
            }
            seen["alive_after"] = await call("job_status", {"id": job})

    # The same server in a Claude Code session whose inbox it can reach: the job's report wakes
    # the session, and the answer says so.
    env = dict(os.environ)
    env["CLAUDE_CODE_MESSAGING_SOCKET"] = os.path.join(workdir, "inbox.sock")
    env["CLAUDE_CODE_MESSAGING_TOKEN"] = "0123456789abcdef0123456789abcdef"
    params = StdioServerParameters(command=baton, args=["mcp"], env=env, cwd=workdir)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["instructions_in_claude"] = init.instructions
            seen["submit_in_claude"] = result_of(await session.call_tool("submit_job", {"command": ["true"]}))
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1], sys.argv[2]))

"""Drives `cairn mcp` with the official MCP Python SDK (PyPI package `mcp`).

Usage: python client.py CAIRN_BINARY DATA_DIR; prints OK on success, raises otherwise.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    assert result.content and result.content[0].type == "text", result
    return result.content[0].text


async def main(binary, data):
    params = StdioServerParameters(command=binary, args=["--dir", data, "mcp"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.serverInfo.name == "cairn", init
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == {"add", "search", "grep", "get", "ls", "tag"}, tools
            assert tools["search"].inputSchema["required"] == ["query"]

            r = await session.call_tool("add", {"path": "notes/raft.md", "content": "# Raft\nLeader election and log replication.\n", "tags": ["consensus"], "meta": {"source": "sdk"}})
            assert not r.isError, r
            assert json.loads(text(r))["status"] == "added"
            r = await session.call_tool("add", {"path": "notes/lsm.md", "content": "LSM trees batch writes with group commit.\n"})
            assert not r.isError, r

            r = await session.call_tool("search", {"query": "leader election", "limit": 5})
            hits = [json.loads(l) for l in text(r).splitlines()]
            assert hits[0]["path"] == "notes/raft.md", hits
            r = await session.call_tool("search", {"query": "group commit", "tag": ["consensus"]})
            assert text(r) == "ok", text(r)  # filtered out: no hits

            r = await session.call_tool("grep", {"pattern": "REPLICATION", "ignore_case": True})
            lines = [json.loads(l) for l in text(r).splitlines()]
            assert lines[0]["path"] == "notes/raft.md" and lines[0]["line"] == 2, lines

            r = await session.call_tool("get", {"path": "notes/lsm.md"})
            assert text(r) == "LSM trees batch writes with group commit.\n", text(r)
            r = await session.call_tool("get", {"path": "notes/missing.md"})
            assert r.isError and "no document" in text(r), r

            r = await session.call_tool("tag", {"paths": ["notes/lsm.md"], "add": ["storage"]})
            assert not r.isError, r
            r = await session.call_tool("ls", {"tag": ["storage"]})
            docs = [json.loads(l) for l in text(r).splitlines()]
            assert [d["path"] for d in docs] == ["notes/lsm.md"], docs
            r = await session.call_tool("ls", {"meta": {"source": "sdk"}})
            assert [json.loads(l)["path"] for l in text(r).splitlines()] == ["notes/raft.md"]

            r = await session.call_tool("search", {})
            assert r.isError, r
    print("OK")


asyncio.run(main(sys.argv[1], sys.argv[2]))

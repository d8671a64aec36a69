"""The HTTP reward server on an ephemeral loopback port: real requests, error statuses, no crash."""

import http.client
import json

import pytest

from mrtpo_openrlhf.rewards.server import start_in_thread
from mrtpo_openrlhf.tasks import TASKS, get_reward_func
from mrtpo_openrlhf.verifiers.tool import TOOL_FORMAT_BLOCK

FUNCS = [{"name": "add", "parameters": {"type": "dict", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}]
LABEL = {"functions": FUNCS, "ground_truth": [{"add": {"a": [1]}}], "category": "simple_python"}
PROMPT = "Add one.\n" + TOOL_FORMAT_BLOCK
GOOD = '<think>t</think><tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
BAD = '<think>t</think><tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call>'


@pytest.fixture(scope="module")
def server():
    srv, thread = start_in_thread("tool", port=0, max_request_bytes=4096)
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


def request(server, method, path, body=None, headers=None):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def post_json(server, payload, path="/get_reward"):
    return request(server, "POST", path, json.dumps(payload).encode(), {"Content-Type": "application/json"})


def test_binds_loopback_and_health(server):
    assert server.server_address[0] == "127.0.0.1"
    assert request(server, "GET", "/health") == (200, {"status": "ok", "task": "tool"})


def test_scores_a_batch_like_reward_func(server):
    payload = {"query": [PROMPT + GOOD, PROMPT + BAD], "prompts": [PROMPT, PROMPT], "labels": [LABEL, None]}
    status, out = post_json(server, payload)
    assert status == 200
    assert out["rewards"] == [2.0, 1.0] and out["scores"] == [1.0, 0.0]
    assert out["extra_logs"]["mrtpo_reward_names"] == [["format", "correctness"]] * 2
    assert out["extra_logs"]["mrtpo_reward_values"] == [[1.0, 1.0], [1.0, 0.0]]
    assert out["extra_logs"]["mrtpo_reward_reasons"][1][1].startswith("bad label")
    # one response per request (what OpenRLHF sends): the same flat contract as in-process
    status, single = post_json(server, {"query": [PROMPT + GOOD], "prompts": [PROMPT], "labels": [LABEL]})
    direct = get_reward_func("tool")([PROMPT + GOOD], [PROMPT], [LABEL])
    assert status == 200 and single["rewards"] == [2.0] and single["scores"] == [1.0]
    assert single["extra_logs"]["mrtpo_reward_values"] == [1.0, 1.0]
    assert single["extra_logs"]["mrtpo_reward_blocks"] == direct["extra_logs"]["mrtpo_reward_blocks"]
    assert out["extra_logs"]["mrtpo_reward_blocks"][0] == direct["extra_logs"]["mrtpo_reward_blocks"]
    status, out = post_json(server, {"query": [], "prompts": [], "labels": []}, path="/")
    assert status == 200 and out["rewards"] == []


@pytest.mark.parametrize(
    "body, status",
    [
        (b"{not json", 400),
        (b"\xff\xfe", 400),
        (json.dumps([1, 2]).encode(), 400),
        (json.dumps({"query": ["a"], "prompts": []}).encode(), 400),
        (json.dumps({"query": ["a"], "prompts": [], "labels": []}).encode(), 400),
        (json.dumps({"query": [1], "prompts": ["p"], "labels": [None]}).encode(), 400),
        (json.dumps({"query": "a", "prompts": "p", "labels": None}).encode(), 400),
    ],
)
def test_bad_bodies_get_400(server, body, status):
    got, out = request(server, "POST", "/get_reward", body)
    assert got == status and out["error"]


def test_oversized_body_is_413_and_server_survives(server):
    big = json.dumps({"query": ["x" * 5000], "prompts": [""], "labels": [None]}).encode()
    status, out = request(server, "POST", "/get_reward", big)
    assert status == 413 and "exceeds" in out["error"]
    assert request(server, "GET", "/health")[0] == 200


def test_unknown_paths_and_methods(server):
    assert post_json(server, {}, path="/nope")[0] == 404
    assert request(server, "GET", "/nope")[0] == 404
    assert request(server, "GET", "/get_reward")[0] == 405


def test_registry_is_lazy_and_rejects_unknown_tasks():
    assert set(TASKS) == {"sql", "instruction", "tool"}
    with pytest.raises(ValueError, match="unknown task"):
        get_reward_func("chess")


def test_deeply_nested_json_is_400_and_server_survives():
    # 200 KB of nesting made json.loads raise RecursionError, which ended the connection unanswered
    srv, thread = start_in_thread("tool", port=0, max_request_bytes=1 << 20)
    nested_label = "[" * 500 + "0" + "]" * 500
    try:
        for body in (b"[" * 200_000, ('{"query": ["x"], "prompts": [""], "labels": [%s]}' % nested_label).encode()):
            status, out = request(srv, "POST", "/get_reward", body)
            assert status == 400 and "nested deeper" in out["error"]
        assert request(srv, "GET", "/health")[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def test_stalled_clients_do_not_starve_others():
    """Silent and trickling clients on 127.0.0.1 are cut after the read timeout; a real client still gets its
    answer while they hold every handler slot, and the handler count never exceeds the bound."""
    import socket
    import time

    srv, thread = start_in_thread("tool", port=0, read_timeout_s=0.5, max_handlers=2)
    host, port = srv.server_address[:2]
    stalled = []
    try:
        for i in range(6):
            sock = socket.create_connection((host, port), timeout=5)
            if i % 2:  # trickle: half a request line, then silence
                sock.sendall(b"POST /get_reward HTTP/1.1\r\nContent-Le")
            stalled.append(sock)
        start = time.monotonic()
        for _ in range(8):  # a busy server may answer 503 (no slot in time): a client retries, as it would in use
            status, out = post_json(srv, {"query": [PROMPT + GOOD], "prompts": [PROMPT], "labels": [LABEL]})
            if status != 503:
                break
        waited = time.monotonic() - start
        assert status == 200 and out["rewards"] == [2.0]
        assert waited < 8.0  # 6 stalled clients, 2 slots, 0.5 s each: a few timeouts at most
        assert srv.peak_handlers == 2
        for sock in stalled:  # the server closed every stalled connection: EOF, a reset, or 503 (no slot in time)
            try:
                data = sock.recv(4096)
                assert data == b"" or data.startswith(b"HTTP/1.1 503 ")
            except ConnectionResetError:
                pass
    finally:
        for sock in stalled:
            sock.close()
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def test_idle_keep_alive_connection_is_closed():
    import time

    srv, thread = start_in_thread("tool", port=0, read_timeout_s=0.3)
    try:
        host, port = srv.server_address[:2]
        conn = http.client.HTTPConnection(host, port, timeout=5)
        conn.request("GET", "/health")
        assert conn.getresponse().read()
        time.sleep(0.8)  # idle past the timeout: the server has closed the connection
        assert conn.sock.recv(1) == b""
        conn.close()
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def test_warm_up_call_scores_and_loads_the_instruction_models():
    import time

    from mrtpo_openrlhf.rewards import instruction
    from mrtpo_openrlhf.tasks import warm_up

    out = instruction.reward_func(*instruction.WARM_UP_CALL)
    assert out["extra_logs"]["mrtpo_reward_values"] == [1.0, 1.0, 1.0]  # a real call, every checker ran
    warm_up("instruction")
    warm_up("tool")  # tasks without a warm-up call are a no-op
    start = time.perf_counter()
    instruction.reward_func(*instruction.WARM_UP_CALL)
    assert time.perf_counter() - start < 1.0

"""The HTTP reward server on an ephemeral loopback port: real requests, error statuses, no crash."""

import http.client
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mrtpo_openrlhf import tasks
from mrtpo_openrlhf.rewards.server import start_in_thread
from mrtpo_openrlhf.tasks import TASKS, get_reward_func
from mrtpo_openrlhf.tasks.tool.verifier import TOOL_FORMAT_BLOCK

FUNCS = [{"name": "add", "parameters": {"type": "dict", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}]
LABEL = {"functions": FUNCS, "ground_truth": [{"add": {"a": [1]}}], "category": "simple_python"}
PROMPT = "Add one.\n" + TOOL_FORMAT_BLOCK
GOOD = '<think>t</think><tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
BAD = '<think>t</think><tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call>'


@pytest.fixture(scope="module")
def server():
    srv, thread = start_in_thread("tool", port=0, max_request_bytes=4096, workers=1)
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


def request(server, method, path, body=None, headers=None, timeout=10):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def post_json(server, payload, path="/get_reward", timeout=10):
    body = json.dumps(payload).encode()
    return request(server, "POST", path, body, {"Content-Type": "application/json"}, timeout=timeout)


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
    srv, thread = start_in_thread("tool", port=0, max_request_bytes=1 << 20, workers=1)
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

    srv, thread = start_in_thread("tool", port=0, read_timeout_s=0.5, max_handlers=2, workers=1)
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

    srv, thread = start_in_thread("tool", port=0, read_timeout_s=0.3, workers=1)
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

    from mrtpo_openrlhf.tasks import warm_up
    from mrtpo_openrlhf.tasks.instruction import reward as instruction

    out = instruction.reward_func(*instruction.WARM_UP_CALL)
    assert out["extra_logs"]["mrtpo_reward_values"] == [1.0, 1.0, 1.0]  # a real call, every checker ran
    warm_up("instruction")
    warm_up("tool")  # tasks without a warm-up call are a no-op
    start = time.perf_counter()
    instruction.reward_func(*instruction.WARM_UP_CALL)
    assert time.perf_counter() - start < 1.0


def test_malformed_label_logs_one_warning_per_response(server, caplog):
    payload = {"query": [PROMPT + GOOD, PROMPT + BAD, PROMPT + GOOD], "prompts": [PROMPT] * 3, "labels": [LABEL, 7, {}]}
    with caplog.at_level(logging.INFO):
        status, out = post_json(server, payload)
        assert post_json(server, {"query": [PROMPT + GOOD], "prompts": [PROMPT], "labels": [LABEL]})[0] == 200
    assert status == 200 and out["rewards"] == [2.0, 1.0, 1.0]  # still answered: the reason is in the response
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "label" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert "response 2 of 3: bad label: label must be" in warnings[0] and "got int" in warnings[0]
    assert "response 3 of 3: bad label:" in warnings[1]
    # the access log has one line per request, with its status
    access = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert len(access) == 2 and all('"POST /get_reward HTTP/1.1" 200' in line for line in access)


@pytest.fixture
def probe_task(tmp_path, monkeypatch):
    """A task whose reward reports the process that scored it and can take its time (label ``sleep``)."""
    (tmp_path / "pid_probe_reward.py").write_text(
        "import os, time\n"
        "from mrtpo_openrlhf.rewards.contract import RewardItem, RewardVector, make_reward_func\n"
        "def score(query, prompt, label):\n"
        "    time.sleep(label['sleep'])\n"
        "    return RewardVector([RewardItem('one', 1.0)], logs={'pid': float(os.getpid())})\n"
        "reward_func = make_reward_func(score, lambda _label: ('one',))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    task = tasks.register(
        tasks.Task(name="pid_probe", reward_module="pid_probe_reward", train_data="-", label_keys=("sleep",))
    )
    try:
        yield task
    finally:
        tasks.unregister("pid_probe")


def test_verifier_calls_run_in_worker_processes_and_a_dead_worker_is_replaced(probe_task):
    srv, thread = start_in_thread("pid_probe", port=0, workers=2)
    body = {"query": ["x"], "prompts": [""], "labels": [{"sleep": 1.0}]}
    try:
        first_pids = list(srv.pool.pids)
        assert len(first_pids) == 2 and os.getpid() not in first_pids
        with ThreadPoolExecutor(4) as clients:  # 4 one-second calls at once: both workers take some
            answers = list(clients.map(lambda _: post_json(srv, body), range(4)))
        assert all(status == 200 for status, _ in answers)
        assert {int(out["extra_logs"]["pid"]) for _, out in answers} == set(first_pids)

        os.kill(first_pids[0], signal.SIGKILL)
        quick = {"query": ["x"], "prompts": [""], "labels": [{"sleep": 0.0}]}
        for _ in range(50):  # until the pool has noticed the death: that request is answered 500
            status, out = post_json(srv, quick)
            if status == 500:
                break
            time.sleep(0.1)
        assert status == 500 and "worker died" in out["error"]
        # waits for the new workers (their start-up takes tens of seconds on a loaded machine), then scores
        status, out = post_json(srv, quick, timeout=120)
        assert status == 200 and int(out["extra_logs"]["pid"]) in srv.pool.pids
        assert not set(srv.pool.pids) & set(first_pids)
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def test_a_body_that_stops_arriving_is_cut_at_the_read_timeout():
    srv, thread = start_in_thread("tool", port=0, read_timeout_s=0.5, workers=1)
    try:
        sock = socket.create_connection(srv.server_address, timeout=10)
        sock.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b'{"query": [')
        assert sock.recv(4096) == b""  # closed without an answer once the deadline passed
        sock.close()
        assert request(srv, "GET", "/health")[0] == 200
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def test_idle_connections_do_not_hold_up_a_request():
    # the read timeout (60 s) outlasts the client's (20 s): an answer means no idle connection was waited for
    srv, thread = start_in_thread("tool", port=0, read_timeout_s=60, workers=1)
    idle = [socket.create_connection(srv.server_address, timeout=5) for _ in range(50)]
    try:
        host, port = srv.server_address
        conn = http.client.HTTPConnection(host, port, timeout=20)
        conn.request(
            "POST", "/get_reward", json.dumps({"query": [PROMPT + GOOD], "prompts": [PROMPT], "labels": [LABEL]})
        )
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["rewards"] == [2.0]
        conn.close()
        assert srv.peak_handlers == 51
    finally:
        for sock in idle:
            sock.close()
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def serve_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "mrtpo_openrlhf.rewards.server", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_bad_or_busy_port_is_one_line_and_exit_2():
    out = serve_cli("--task", "tool", "--port", "70000")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "python -m mrtpo_openrlhf.rewards.server serve: error: --port 70000: a port is 0..65535"
    ]
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        out = serve_cli("--task", "tool", "--port", str(port), "--workers", "1")
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--port {port}: cannot listen there: Address already in use" in lines[0]
    out = serve_cli("--task", "tool", "--workers", "0")
    assert out.returncode == 2 and out.stderr.strip().endswith("--workers 0: must be >= 1")


def test_cli_entry_point_serves_and_stops_with_its_workers_on_sigterm():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mrtpo_openrlhf.rewards.server",
            "serve",
            "--task",
            "sql",
            "--port",
            "0",
            "--workers",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()  # printed once the workers are ready
        match = re.fullmatch(
            r"serving task 'sql' on http://127\.0\.0\.1:(\d+)/get_reward \(1 verifier workers\)\n", line
        )
        assert match, line
        port = int(match.group(1))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/health")
        assert json.loads(conn.getresponse().read()) == {"status": "ok", "task": "sql"}
        conn.request("POST", "/get_reward", json.dumps({"query": ["x"], "prompts": [""], "labels": ["{"]}))
        resp = conn.getresponse()
        assert resp.status == 200 and len(json.loads(resp.read())["rewards"]) == 1
        conn.close()
    finally:
        proc.terminate()
        rc = proc.wait(timeout=30)
    stderr = proc.stderr.read()
    assert rc == 0, stderr
    assert "uvicorn.access: 127.0.0.1:" in stderr and '"POST /get_reward HTTP/1.1" 200' in stderr
    assert "response 1 of 1: bad label: label is a string but not JSON" in stderr
    pids = [int(p) for p in re.search(r"verifier workers ready \(pids ([\d ]+)\)", stderr).group(1).split()]
    for pid in pids:  # the workers stopped with the server
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_label_this_server_cannot_score_is_an_http_error_every_client_sees(tmp_path):
    """Issue 49, item 5: a missing SQL database answered 200 with ``rewards [0.0]`` (the reason only under
    ``mrtpo_setup_error``), which a plain OpenRLHF or verl client trains on as a zero. It is a 500 naming the
    database, and OpenRLHF 0.11.2's own HTTP client (``SingleTurnAgentExecutor``) raises on it instead of returning
    rewards."""
    import asyncio

    from openrlhf.utils.agent import SingleTurnAgentExecutor

    label = {"db_id": "school", "gold": "SELECT 1", "db_root": str(tmp_path)}
    query = "<think>t</think>\n```sql\nSELECT 1\n```"
    srv, thread = start_in_thread("sql", port=0, workers=1)
    try:
        status, out = post_json(srv, {"query": [query], "prompts": [""], "labels": [label]})
        assert status == 500 and "rewards" not in out, out
        expected = f"SQL database not found: {tmp_path / 'school' / 'school.sqlite'}"
        assert out["error"] == f"reward setup error: {out['mrtpo_setup_error']}" and expected in out["error"]
        url = "http://{}:{}/get_reward".format(*srv.server_address[:2])
        with pytest.raises(RuntimeError, match="Request error"):  # after its 5 tries, 1 s apart
            asyncio.run(SingleTurnAgentExecutor(url)._fetch_rewards_via_http([query], [""], [label]))
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def test_the_preflight_names_the_servers_reason_for_a_non_200(tmp_path):
    """With item 5's 500, the pre-flight's one call on the first row names the server's reason."""
    from mrtpo_openrlhf.cli.preflight import _poster

    label = {"db_id": "school", "gold": "SELECT 1", "db_root": str(tmp_path)}
    srv, thread = start_in_thread("sql", port=0, workers=1)
    try:
        url = "http://{}:{}/get_reward".format(*srv.server_address[:2])
        with pytest.raises(ValueError, match=r"HTTP 500: reward setup error: .*SQL database not found"):
            _poster(url)("SELECT 1", "", label)
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)

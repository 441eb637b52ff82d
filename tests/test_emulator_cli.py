"""``python -m emulator`` starts a server with the settings given on the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from emulator import EmulatorServer
from testbed.stack import free_port
from tests.support import wait_until

REPOSITORY = Path(__file__).resolve().parent.parent


def test_the_command_line_serves_with_its_settings() -> None:
    port = free_port()
    command = [sys.executable, "-m", "emulator", "--port", str(port), "--limit", "500", "--tokenizer", "o200k",
               "--fault-script", "429", "--input-tokens-per-minute", "90000", "--second-client-share", "0.2",
               "--log-level", "warning"]  # fmt: skip
    server = subprocess.Popen(command, cwd=REPOSITORY, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"

        def answers() -> Any:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            return httpx.get(f"{base}/v1/emulator/config").json()

        config = wait_until(answers, 20, "the emulator answered", ignoring=(httpx.TransportError,))
        assert (config["limit"], config["tokenizer"], config["faults"]["script"]) == (500, "o200k", ["429"])
        limits = config["rate_limits"]
        assert (limits["input_tokens_per_minute"], limits["second_client_share"], limits["requests_per_minute"]) == (
            90000,
            0.2,
            0,
        )
        hello = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx.post(f"{base}/v1/messages", json=hello, headers={"anthropic-version": "2023-06-01"})
        assert answer.status_code == 429
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_bad_tokenizer_is_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "emulator", "--tokenizer", "gpt2"], cwd=REPOSITORY, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "gpt2: no such tokenizer file" in result.stderr


def test_a_setting_out_of_range_is_a_usage_error_naming_it() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "emulator", "--fault-kinds", "429,x"], cwd=REPOSITORY, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "faults.kinds.1: Input should be '429', '529', '500', 'drop' or 'hang'" in result.stderr


def test_unknown_paths_get_json_errors(emulator: EmulatorServer) -> None:
    missing = httpx.get(f"{emulator.base_url}/v1/files/none")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"
    wrong_method = httpx.get(f"{emulator.base_url}/v1/messages")
    assert wrong_method.status_code == 405
    assert httpx.get(f"{emulator.openai_base_url}/chat/nothing").json()["error"]["type"] == "invalid_request_error"


def test_reset_checks_its_options(emulator: EmulatorServer) -> None:
    answer = httpx.post(f"{emulator.base_url}/v1/emulator/reset", json={"keep_config": "yes"})
    assert answer.status_code == 400


def test_reset_can_keep_the_settings(emulator_reset: EmulatorServer) -> None:
    emulator_reset.configure(limit=1234)
    emulator_reset.reset(keep_config=True)
    assert emulator_reset.configure()["limit"] == 1234
    emulator_reset.reset()
    assert emulator_reset.configure()["limit"] == 1_000_000


def test_the_models_endpoint_gives_the_limit_and_the_output_limit(emulator_reset: EmulatorServer) -> None:
    import anthropic

    emulator_reset.configure(limit=123_456, max_output_tokens=7_000)
    client = anthropic.Anthropic(api_key="any", base_url=emulator_reset.base_url)
    info = client.models.retrieve("claude-sonnet-5-5")
    assert (info.id, info.max_input_tokens, info.max_tokens) == ("claude-sonnet-5-5", 123_456, 7_000)

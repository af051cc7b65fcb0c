"""Check server.py and client.py against each other, no toolgate in between.

    .tools/venv/bin/python tests/mcp/selftest.py      (exit 0 and "N passed, 0 failed" when all is well)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable


def start(flags: list[str], count_file: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [PY, os.path.join(HERE, "server.py"), "--port", "0", "--count-file", count_file, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line and line[0] == "READY", line
    return proc, f"http://127.0.0.1:{line[1]}/mcp"


def client(url: str, *args: str) -> dict:
    out = subprocess.run([PY, os.path.join(HERE, "client.py"), "--url", url, *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def main() -> None:
    passed = failed = 0
    for flags in ([], ["--json-response"], ["--stateless"], ["--stateless", "--json-response"]):
        for mode in ("legacy", "modern"):
            with tempfile.TemporaryDirectory() as tmp:
                counts = os.path.join(tmp, "counts.json")
                proc, url = start(flags, counts)
                try:
                    m = ["--mode", mode]
                    checks = {
                        "list": (
                            client(url, *m, "list")["tools"] == ["read_logs", "create_issue", "echo", "secret_tool"]
                        ),
                        "read_logs": client(url, *m, "call", "read_logs", '{"service":"api"}')["structuredContent"][
                            "lines"
                        ][0]["client_ip"]
                        == "10.0.0.1",
                        "invalid_params": client(
                            url, *m, "call", "read_logs", '{"service":"api","window_minutes":0}'
                        )["error"]["code"]
                        == -32602,
                        "create_issue": client(url, *m, "call", "create_issue", '{"project_key":"OPS","title":"t"}')[
                            "structuredContent"
                        ]["project_key"]
                        == "OPS",
                        "tool_error": client(url, *m, "call", "create_issue", '{"project_key":"ERR","title":"t"}')[
                            "isError"
                        ]
                        is True,
                        "echo": client(url, *m, "call", "echo", '{"text":"hi"}')["content"][0]["text"] == "hi",
                        "resources": client(url, *m, "resources")["resources"] == ["config://app"],
                        "prompts": client(url, *m, "prompts")["prompts"] == ["summarize"],
                        "bearer_sent": "tools" in client(url, *m, "--token", "t0k", "list"),
                        "counts": json.load(open(counts)) == {"read_logs": 2, "create_issue": 2, "echo": 1},
                    }
                finally:
                    proc.terminate()
                    proc.wait()
            for name, ok in checks.items():
                passed += ok
                failed += not ok
                if not ok:
                    print(f"FAIL {flags} {mode} {name}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

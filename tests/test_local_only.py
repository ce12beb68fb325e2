"""Local by default: the dashboard started the README's way listens on loopback only, and sharing is explicit.

Also the pure rules behind it (servebench.dashboard.sharing) and serve-engine's warning for a non-loopback --host.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
from browser import browser_page, free_port, require_chromium
from hypothesis import given, settings
from hypothesis import strategies as st
from processes import stop

from servebench.dashboard.sharing import (
    SHARED_SWEEP_MAX_REQUESTS,
    Sharing,
    is_long_sweep,
    is_loopback,
    remote_work_allowed,
    upload_size_error,
)

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / ".streamlit" / "config.toml"


def test_project_config_keeps_the_dashboard_on_this_machine() -> None:
    config = tomllib.loads(CONFIG.read_text(encoding="utf-8"))
    assert config["server"]["address"] == "127.0.0.1"
    assert config["browser"]["gatherUsageStats"] is False
    assert config["client"]["toolbarMode"] in ("minimal", "viewer")  # no Deploy entry
    assert config["server"]["maxUploadSize"] == 200  # the limit README and docs/dashboard.md state


def test_streamlit_reads_the_project_config_from_the_repository_root() -> None:
    """What `./dev.sh app` gets: Streamlit's effective options, as `streamlit config show` prints them."""
    streamlit = Path(sys.executable).parent / "streamlit"
    out = subprocess.run([str(streamlit), "config", "show"], cwd=REPO, capture_output=True, text=True,
                         timeout=120).stdout
    effective = {line.split(" = ")[0]: line.split(" = ", 1)[1] for line in out.splitlines()
                 if " = " in line and not line.startswith("#")}
    assert effective["address"] == '"127.0.0.1"'
    assert effective["gatherUsageStats"] == "false"
    assert effective["toolbarMode"] == '"minimal"'
    assert effective["fileWatcherType"] == '"none"'  # the default kept a core busy (the idle test below)


def _listening_addresses(port: int) -> list[str]:
    """Return the local addresses of TCP sockets in LISTEN state on ``port``, from /proc/net/tcp and tcp6."""
    found = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            hex_addr, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(hex_addr)
            # the kernel prints each 32-bit word in host (little-endian) order
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(str(ipaddress.ip_address(words if width == 16 else words[:4])))
    return found


def _non_loopback_address() -> str | None:
    """Return this machine's address on its default route (no packet is sent), or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if ipaddress.ip_address(address).is_loopback else address


def _dev_sh_is_set_up() -> bool:
    """Return whether `./dev.sh app` would start at once: this is its .venv and its stamp is current (no pip run)."""
    stamp = REPO / ".venv" / ".servebench-stamp"
    want = hashlib.sha256((REPO / "requirements.txt").read_bytes() + (REPO / "pyproject.toml").read_bytes())
    return (Path(os.path.abspath(sys.executable)).parent == REPO / ".venv" / "bin" and stamp.exists()
            and stamp.read_text().strip() == want.hexdigest())


def _readme_app_command(port: int) -> list[str]:
    """Return `./dev.sh app` with a free port; its exact `streamlit run` where dev.sh's setup is not current."""
    args = ["--server.headless", "true", "--server.port", str(port)]
    if _dev_sh_is_set_up():
        return [str(REPO / "dev.sh"), "app", *args]
    return [str(Path(sys.executable).parent / "streamlit"), "run", "app.py", *args]


def _start_readme_app(port: int) -> subprocess.Popen:
    """Start the dashboard as the README does (:func:`_readme_app_command`) and wait until it answers on loopback."""
    proc = subprocess.Popen(_readme_app_command(port), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, proc.stdout.read().decode(errors="replace") if proc.stdout else ""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            if time.monotonic() >= deadline:
                stop(proc, timeout_s=10)
                raise AssertionError("the dashboard did not answer on 127.0.0.1 in 90 s") from None
            time.sleep(0.5)


def _cpu_s(pid: int) -> float:
    """Return the user + system CPU seconds process ``pid`` has used (Linux: /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads listening sockets from /proc/net (Linux)")
def test_app_started_the_readme_way_listens_on_loopback_only() -> None:
    port = free_port()
    proc = _start_readme_app(port)
    try:
        listening = _listening_addresses(port)
        assert listening, f"nothing listens on port {port}"
        assert all(ipaddress.ip_address(a).is_loopback for a in listening), listening
        other = _non_loopback_address()
        if other is not None:  # the machine's own network address is refused
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((other, port), timeout=5).close()
    finally:
        stop(proc, timeout_s=10)
    output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    assert "Collecting usage statistics" not in output, output
    assert f"http://127.0.0.1:{port}" in output, output  # the URL it prints is the loopback one


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads the server's CPU time from /proc (Linux)")
def test_app_started_the_readme_way_is_idle_between_interactions() -> None:
    """With a page open and nothing asked of it, the server uses next to no CPU.

    Streamlit's default file watcher (watchdog's inotify) kept a whole core busy, its thread re-adding every watch
    after each event-queue overflow: 15 CPU s in 15 s, the dashboard's first load 4.75 s against 3.55 s on 2 cores.
    The project's config turns watching off; an idle second measures about 0.01 CPU s.
    """
    require_chromium()
    port = free_port()
    proc = _start_readme_app(port)
    try:
        with browser_page(viewport=(1400, 900)) as page:
            page.goto(f"http://127.0.0.1:{port}", wait_until="domcontentloaded")
            page.get_by_text("Eight numbers").first.wait_for(timeout=90_000)  # a session, its first run done
            page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=90_000)
            time.sleep(2)  # what the first view starts after it is drawn (the chart code's preload) ends
            before = _cpu_s(proc.pid)
            time.sleep(5)
            used = _cpu_s(proc.pid) - before
    finally:
        stop(proc, timeout_s=10)
    assert used < 1.0, f"the idle dashboard used {used:.2f} CPU s in 5 s (a file watcher left on?)"


@given(st.ip_addresses())
@settings(max_examples=60, deadline=None)
def test_only_loopback_addresses_keep_the_dashboard_local(address) -> None:
    text = str(address)
    assert is_loopback(text) == address.is_loopback
    assert Sharing.of(text, {}).shared == (not address.is_loopback)


@pytest.mark.parametrize("address", ["", None, "0.0.0.0", "::", "my-laptop.local", "10.0.0.7"])
def test_every_other_address_is_shared_and_needs_the_opt_in(address) -> None:
    share = Sharing.of(address, {})
    assert share.shared and not share.may_start_work
    assert "Shared on the network" in (share.banner() or "")
    assert "SERVEBENCH_ALLOW_REMOTE_WORK=1" in share.opt_in_message("a timing run")
    assert Sharing.of(address, {"SERVEBENCH_ALLOW_REMOTE_WORK": "1"}).may_start_work


def test_local_dashboard_has_no_banner_and_may_start_work() -> None:
    for address in ("127.0.0.1", "localhost", "::1"):
        share = Sharing.of(address, {})
        assert share.banner() is None and share.may_start_work


@pytest.mark.parametrize(("value", "allowed"), [("1", True), ("true", True), ("YES", True), ("0", False),
                                                 ("", False), ("no", False)])
def test_remote_work_opt_in_values(value: str, allowed: bool) -> None:
    assert remote_work_allowed({"SERVEBENCH_ALLOW_REMOTE_WORK": value}) is allowed


def test_long_sweep_is_judged_by_the_most_requests_it_may_simulate() -> None:
    assert not is_long_sweep(7, 300, search=True)  # the page's default on profile_b
    assert is_long_sweep(7, 10_000, search=False)  # paged_chat's 10,000 requests per point
    assert is_long_sweep(1, SHARED_SWEEP_MAX_REQUESTS + 1, search=False)
    assert not is_long_sweep(1, SHARED_SWEEP_MAX_REQUESTS, search=False)


def test_upload_size_message_names_the_limit() -> None:
    assert upload_size_error("runs.parquet", 200 * 1024 * 1024, 200) is None
    message = upload_size_error("runs.parquet", 200 * 1024 * 1024 + 1, 200, "Use the CLI.")
    assert message == "runs.parquet is 200.0 MB: the dashboard takes uploads up to 200 MB (server.maxUploadSize). " \
                      "Use the CLI."


def _serve_engine(*args: str) -> subprocess.CompletedProcess:
    # --policy bogus: the command stops with exit code 2 before it builds the engine or binds anything
    return subprocess.run([sys.executable, "-m", "servebench", "serve-engine", *args, "--policy", "bogus"],
                          capture_output=True, text=True, timeout=120)


def test_serve_engine_warns_on_stderr_when_host_is_beyond_loopback() -> None:
    res = _serve_engine("--host", "0.0.0.0", "--json")
    assert res.returncode == 2
    assert res.stdout == ""
    warning, error = res.stderr.strip().splitlines()
    assert warning.startswith("warning: --host 0.0.0.0 serves the engine beyond this machine")
    assert error == "error: --policy 'bogus': expected paged or reserve"


@pytest.mark.parametrize("host", [None, "127.0.0.1", "::1", "localhost"])
def test_serve_engine_on_loopback_says_nothing_about_the_host(host: str | None) -> None:
    res = _serve_engine(*(["--host", host] if host else []))
    assert res.returncode == 2
    assert "warning" not in res.stderr and res.stderr.startswith("error: --policy")

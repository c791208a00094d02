"""A private dockerd for tests and fault benchmarks that stop and start an engine: never
the shared one. Its own data root, exec root, socket and bridge; optional --live-restore
(containers keep running while it is down)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

PRIVATE = {
    "data_root": Path("/var/lib/flowcon-test-engine"),
    "exec_root": Path("/run/flowcon-test-engine"),
    "pidfile": Path("/run/flowcon-test-engine.pid"),
    "sock": Path("/run/flowcon-test-engine.sock"),
}
PRIVATE_HOST = f"unix://{PRIVATE['sock']}"
# The private engine gets a bridge of its own. With --bridge=none, dockerd deletes the
# interface named docker0 at start, and all engines here share one network namespace:
# the main engine's default bridge would vanish under every later test.
PRIVATE_BRIDGE = "flowcon-tebr"
PRIVATE_BRIDGE_CIDR = "172.31.253.1/24"


def ensure_private_bridge() -> bool:
    """Create the private engine's bridge; True when this call created it."""
    if Path(f"/sys/class/net/{PRIVATE_BRIDGE}").exists():
        return False
    for cmd in (
        ["ip", "link", "add", PRIVATE_BRIDGE, "type", "bridge"],
        ["ip", "addr", "add", PRIVATE_BRIDGE_CIDR, "dev", PRIVATE_BRIDGE],
        ["ip", "link", "set", PRIVATE_BRIDGE, "up"],
    ):
        subprocess.run(cmd, check=True, capture_output=True)
    return True


class EngineUnavailable(RuntimeError):
    """No private engine can run here (no dockerd, not root)."""


class PrivateEngine:
    def __init__(self, log: Path) -> None:
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, live_restore: bool = False) -> None:
        if shutil.which("dockerd") is None:
            raise EngineUnavailable("dockerd not installed")
        cmd = [
            "dockerd",
            "--data-root", str(PRIVATE["data_root"]),
            "--exec-root", str(PRIVATE["exec_root"]),
            "--pidfile", str(PRIVATE["pidfile"]),
            "-H", PRIVATE_HOST,
            f"--bridge={PRIVATE_BRIDGE}",
            "--iptables=false",
            "--ip-masq=false",
            "--shutdown-timeout", "1",
            *(["--live-restore"] if live_restore else []),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=self.log.open("a"), start_new_session=True
        )
        import docker

        def up() -> bool:
            try:
                return bool(docker.DockerClient(base_url=PRIVATE_HOST, timeout=5).ping())
            except Exception:
                if self.proc is None or self.proc.poll() is not None:
                    tail = self.log.read_text()[-500:]
                    raise EngineUnavailable(f"private dockerd exited: {tail}") from None
                return False

        end = time.monotonic() + 60
        while not up():
            if time.monotonic() > end:
                tail = self.log.read_text()[-500:]
                raise EngineUnavailable(f"private dockerd did not answer: {tail}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


def cleanup_private() -> None:
    pid = PRIVATE["pidfile"]
    if pid.exists():  # a dockerd left behind by a crashed run of this test
        try:
            os.kill(int(pid.read_text().strip()), signal.SIGTERM)
            time.sleep(3)
        except (ValueError, ProcessLookupError, PermissionError):
            pass
    for root in (PRIVATE["exec_root"], PRIVATE["data_root"]):
        if root.exists():
            subprocess.run(
                f"grep -o ' {root}[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l",
                shell=True,
                check=False,
            )
            shutil.rmtree(root, ignore_errors=True)
    for f in (PRIVATE["sock"], pid):
        f.unlink(missing_ok=True)


def setup_private(log: Path, live_restore: bool = False) -> tuple[PrivateEngine, bool]:
    """A started private engine with the testbox image, and whether the bridge was
    created here (give it to ``teardown_private``)."""
    if os.geteuid() != 0:
        raise EngineUnavailable("a private dockerd needs root")
    cleanup_private()
    created_bridge = shutil.which("ip") is not None and ensure_private_bridge()
    eng = PrivateEngine(log)
    try:
        eng.start(live_restore)
        repo = Path(__file__).resolve().parents[2]  # this checkout (flowcon/testing/..)
        subprocess.run(
            ["bash", str(repo / "images/testbox/build.sh"), "flowcon/testbox:latest", PRIVATE_HOST],
            check=True,
            capture_output=True,
        )
    except BaseException:
        teardown_private(eng, created_bridge)
        raise
    return eng, created_bridge


def teardown_private(eng: PrivateEngine, created_bridge: bool) -> None:
    eng.stop()
    cleanup_private()
    if created_bridge:
        subprocess.run(["ip", "link", "delete", PRIVATE_BRIDGE], check=False)

"""Checkpoints load without running code on the training images' torch (1.13 in
flowcon/elastic-example, whose own ``weights_only`` refuses Python floats and whose
``torch.load`` ignores a ``pickle_module``): an optimizer's state loads, a pickle that
would run a command is refused and the command never runs, torn bytes are unreadable."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.docker

IMAGE = "flowcon/elastic-example:latest"
SCRIPT = """
import os, random, tempfile, torch
from pathlib import Path
from flowcon.elastic import state as st
from flowcon.elastic.restart import save_checkpoint, load_checkpoint
m = torch.nn.Linear(3, 2); o = torch.optim.Adam(m.parameters())
m(torch.randn(4, 3)).sum().backward(); o.step()
d = Path(tempfile.mkdtemp())
save_checkpoint(d, {"step": 5, "rng": st.rng_state(), "model": m.state_dict(),
                    "optimizer": o.state_dict(), "lr": 1.5, "py": random.getstate()})
got = load_checkpoint(d)
m.load_state_dict(got["model"]); o.load_state_dict(got["optimizer"])
print("LOADED", got["step"], got["lr"])
class W:
    def __reduce__(self):
        return (os.system, ("touch /tmp/ran",))
torch.save({"step": 1, "x": W()}, d / "checkpoint.pt")
try:
    load_checkpoint(d)
except RuntimeError as exc:
    print("REFUSED" if "refused" in str(exc) else "OTHER", os.path.exists("/tmp/ran"))
(d / "checkpoint.pt").write_bytes(os.urandom(300))
try:
    load_checkpoint(d)
except RuntimeError as exc:
    print("TORN" if "unreadable" in str(exc) else "OTHER")
"""


def test_checkpoints_load_safely_on_the_images_torch(docker_client, labeled) -> None:
    try:
        docker_client.images.get(IMAGE)
    except Exception:
        pytest.skip(f"{IMAGE} not built (images/elastic-example/build.sh)")
    box = docker_client.containers.create(
        IMAGE, ["python3", "-c", SCRIPT], labels=labeled(), network_mode="none"
    )
    try:
        box.start()
        box.wait(timeout=120)
        out = box.logs().decode()
    finally:
        box.remove(force=True)
    assert "LOADED 5 1.5" in out, out
    assert "REFUSED False" in out, out
    assert "TORN" in out, out

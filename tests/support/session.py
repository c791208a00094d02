"""What every test of one pytest session shares: the repo's paths, the label on every
container a test creates, this session's id (the end-of-session sweep removes only this
session's leftovers), and the images the engine tests run."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("FLOWCON_SHARED", REPO.parent / "shared"))
TEST_LABEL = "flowcon.test"
TESTBOX_IMAGE = "flowcon/testbox:latest"
BASE_IMAGE = os.environ.get("FLOWCON_BASE_IMAGE", "flowcon/base:bookworm")
# One id per pytest session: the end-of-session sweep removes only this session's
# leftovers, never the containers of another pytest run on the same engine.
SESSION_ID = uuid.uuid4().hex[:12]
SESSION_LABEL = f"{TEST_LABEL}.session"

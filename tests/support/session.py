"""What every test of one pytest session shares: the repo's path, the label on every
container a test creates, this session's id (the end-of-session sweep removes only this
session's leftovers), and the image the engine tests run."""

from __future__ import annotations

import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_LABEL = "flowcon.test"
TESTBOX_IMAGE = "flowcon/testbox:latest"
# One id per pytest session: the end-of-session sweep removes only this session's
# leftovers, never the containers of another pytest run on the same engine.
SESSION_ID = uuid.uuid4().hex[:12]
SESSION_LABEL = f"{TEST_LABEL}.session"

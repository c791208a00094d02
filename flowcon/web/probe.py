"""Container healthcheck: ``python3 -m flowcon.web.probe [URL]`` exits 0 when URL answers
200 within the timeout, 1 otherwise (the base image has no curl; stdlib only).

Default URL: the agent's ``http://127.0.0.1:9464/healthz``.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

from flowcon.tls import ENV_CACERT, client_context

DEFAULT_URL = "http://127.0.0.1:9464/healthz"


def probe(url: str, timeout: float = 5.0) -> tuple[bool, str]:
    """(healthy, a one-line reason); an https URL's certificate is checked against
    ``FLOWCON_CACERT`` (a PEM file) or the system's CAs."""
    tls = client_context(os.environ.get(ENV_CACERT)) if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=tls) as resp:
            body = resp.read(2000).decode(errors="replace")
            return resp.status == 200, f"{resp.status} {body.strip()}"
    except urllib.error.HTTPError as exc:
        body = exc.read(2000).decode(errors="replace")
        return False, f"{exc.code} {body.strip()}"
    except (OSError, ValueError) as exc:
        return False, f"{url}: {exc}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    url = args[0] if args else DEFAULT_URL
    ok, line = probe(url)
    print(line[:500])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

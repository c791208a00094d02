"""A small client of the allocator's HTTP API (stdlib urllib, no extra dependency)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import quote, urlencode

from flowcon.allocator.records import JsonObject
from flowcon.allocator.views import JobDetail, JobView, LogPage, SubmitAnswer
from flowcon.tls import client_context


class ClientError(RuntimeError):
    """The daemon answered with an error, or could not be reached (``status`` 0)."""

    def __init__(self, status: int, message: str, body: JsonObject | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body or {}


class AllocatorClient:
    """The API's calls with their JSON answers as parsed (``AllocatorApi`` reads them as
    ``flowcon.allocator.views``)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 30.0,
        cacert: str | None = None,
    ) -> None:
        """``cacert``: the CA (PEM) an https URL's certificate is checked with (None: the
        system's CAs)."""
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._tls = client_context(cacert) if self.url.startswith("https:") else None

    def _call(self, method: str, path: str, body: object = None) -> tuple[int, JsonObject]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._tls) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read() or b"{}")
            except (json.JSONDecodeError, OSError):
                payload = {}
            msg = payload.get("error") or exc.reason or f"HTTP {exc.code}"
            raise ClientError(exc.code, str(msg), payload) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ClientError(0, f"cannot reach the allocator at {self.url}: {reason}") from None

    def health(self) -> JsonObject:
        return self._call("GET", "/healthz")[1]

    def jobs(self) -> list[JsonObject]:
        jobs: list[JsonObject] = self._call("GET", "/api/v1/jobs")[1].get("jobs", [])
        return jobs

    def whoami(self) -> JsonObject | None:
        """``{"name", "roles"}`` of this client's token; None from an allocator without
        the route (one from before named users)."""
        try:
            return self._call("GET", "/api/v1/whoami")[1]
        except ClientError as exc:
            if exc.status == 404:
                return None
            raise

    def job(self, name: str) -> JsonObject:
        return self._call("GET", f"/api/v1/jobs/{quote(name, safe='')}")[1]

    def submit(self, spec: JsonObject) -> JsonObject:
        return self._call("POST", "/api/v1/jobs", spec)[1]

    def dry_run(self, spec: JsonObject) -> JsonObject:
        """What a submit would decide now; the allocator creates nothing."""
        return self._call("POST", "/api/v1/jobs?dry_run=true", spec)[1]

    def logs(
        self, name: str, rank: int | None = None, after: str | None = None, tail: int | None = None
    ) -> JsonObject:
        """One page of the job's workers' output; pass its ``cursor`` as ``after`` next."""
        query = {
            k: v for k, v in (("rank", rank), ("after", after), ("tail", tail)) if v is not None
        }
        path = f"/api/v1/jobs/{quote(name, safe='')}/logs"
        return self._call("GET", path + (f"?{urlencode(query)}" if query else ""))[1]

    def cancel(self, name: str) -> JsonObject:
        return self._call("DELETE", f"/api/v1/jobs/{quote(name, safe='')}")[1]

    def scale(self, name: str, gpus: int | None) -> JsonObject:
        body: JsonObject = {"auto": True} if gpus is None else {"gpus": gpus}
        return self._call("POST", f"/api/v1/jobs/{quote(name, safe='')}/scale", body)[1]

    def migrate(self, name: str, node: str) -> JsonObject:
        path = f"/api/v1/jobs/{quote(name, safe='')}/migrate"
        return self._call("POST", path, {"node": node})[1]

    def nodes(self) -> list[JsonObject]:
        out: object = self._call("GET", "/api/v1/nodes")[1]
        return [n for n in out if isinstance(n, dict)] if isinstance(out, list) else []

    def node(self, name: str) -> JsonObject:
        return self._call("GET", f"/api/v1/nodes/{quote(name, safe='')}")[1]

    def drain(self, name: str, force: bool = False) -> JsonObject:
        path = f"/api/v1/nodes/{quote(name, safe='')}/drain"
        return self._call("POST", path, {"force": force})[1]

    def undrain(self, name: str) -> JsonObject:
        return self._call("POST", f"/api/v1/nodes/{quote(name, safe='')}/undrain", {})[1]

    def post_measurements(self, node: str, measurements: list[JsonObject]) -> JsonObject:
        return self._call(
            "POST", "/api/v1/measurements", {"node": node, "measurements": measurements}
        )[1]


class AllocatorApi:
    """The allocator's API with typed answers (``flowcon.allocator.views``): what the
    client commands call."""

    def __init__(self, client: AllocatorClient) -> None:
        self.client = client
        self.url = client.url

    def jobs(self) -> list[JobView]:
        return [JobView.from_json(j) for j in self.client.jobs()]

    def own_name(self) -> str | None:
        """The caller's name when it is a user (whose own jobs ``flowcon jobs`` lists by
        default); None for the operator, a reader, or an allocator without names."""
        me = self.client.whoami()
        if not me or "user" not in (me.get("roles") or []) or me.get("name") == "operator":
            return None
        return str(me.get("name"))

    def job(self, name: str) -> JobDetail:
        return JobDetail.from_json(self.client.job(name))

    def submit(self, spec: JsonObject) -> SubmitAnswer:
        return SubmitAnswer.from_json(self.client.submit(spec))

    def dry_run(self, spec: JsonObject) -> SubmitAnswer:
        return SubmitAnswer.from_json(self.client.dry_run(spec))

    def logs(
        self, name: str, rank: int | None = None, after: str | None = None, tail: int | None = None
    ) -> LogPage:
        return LogPage.from_json(self.client.logs(name, rank=rank, after=after, tail=tail))

    def cancel(self, name: str) -> JobView:
        return JobView.from_json(self.client.cancel(name))

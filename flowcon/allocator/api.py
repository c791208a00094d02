"""The allocator's local HTTP JSON API (stdlib ThreadingHTTPServer).

Routes (all JSON), with the role each needs (flowcon.allocator.auth):
  GET    /healthz                    200 ok / 503 unhealthy (loop stuck, engine failing)  public
  GET    /metrics                    Prometheus text                                public
  GET    /ui, /static/*              the live view (HTML, JS, CSS)                  public
  GET    /api/v1/history             jobs, GPUs per job over time, admissions       read
  GET    /api/v1/jobs                every job (env values as "***")                read
  GET    /api/v1/jobs/{name}         one job, with its admissions and events        read
  GET    /api/v1/jobs/{name}/logs    its workers' output (?rank=N&after=CURSOR&tail=N)  read
  POST   /api/v1/jobs                submit a job spec (JSON object or YAML text)   user
  POST   /api/v1/jobs?dry_run=true   what a submit would decide now; creates nothing  user
  DELETE /api/v1/jobs/{name}         cancel                                         user
  POST   /api/v1/measurements        agent measurements                             agent

Calls carry ``Authorization: Bearer <token>``; the token and the body's declared size are
checked before the body is read (401/403, 411 without Content-Length, 413 over 1 MiB), so
a refused call cannot change state.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from flowcon.allocator import audit
from flowcon.allocator.auth import Credentials, Principal, Role, required_role
from flowcon.allocator.store import write_failure
from flowcon.allocator.views import Answer, JobDetail, JobView, LogPage, NodeView
from flowcon.textfile import safe_load_yaml
from flowcon.web.static import static_response

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # 1 MiB: a job spec or a round of measurements is far smaller
# (HTTP status, body: JSON-able, or bytes sent as they are, content type)
Reply = tuple[int, object, str]


def _failure(method: str, path: str, exc: Exception) -> Reply:
    """The answer for an exception a route did not handle: 507/503 with a clear message
    when the store cannot be written (nothing was changed), else 500 (a bug, logged with
    its traceback)."""
    failed = write_failure(exc)
    if failed is None:
        log.exception("%s %s failed", method, path)
        return 500, {"error": f"internal error: {exc}"}, _JSON
    full, why = failed
    log.error("%s %s refused: the allocator's store cannot be written: %s", method, path, why)
    status = HTTPStatus.INSUFFICIENT_STORAGE if full else HTTPStatus.SERVICE_UNAVAILABLE
    message = (
        f"the allocator's store cannot be written ({why}): nothing was changed; "
        "try again once its disk has space"
        if full
        else f"the allocator's store cannot be written ({why}): nothing was changed"
    )
    return int(status), {"error": message, "store": why}, _JSON


class ApiError(Exception):
    """An error with an HTTP status and a JSON body ({"error": ..., "field": ...})."""

    def __init__(self, status: int, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, object] = {"error": message, **extra}


class Service(Protocol):
    """What the HTTP layer needs from the daemon."""

    def health(self) -> dict[str, object]: ...
    def history(self, since: float | None = None) -> dict[str, object]: ...
    def metrics_text(self) -> bytes: ...
    # ``who``: the caller (None: the operator, as for calls from inside the process)
    def list_jobs(self, who: Principal | None = None) -> list[JobView]: ...
    # ``GET /api/v1/jobs``'s body, JSON-encoded: ``{"jobs": [list_jobs' views]}``
    def jobs_body(self, who: Principal | None = None) -> bytes: ...
    def get_job(self, name: str, who: Principal | None = None) -> JobDetail: ...
    def submit(
        self, spec: Mapping[str, object], who: Principal | None = None
    ) -> tuple[int, Answer]: ...
    def dry_run(self, spec: Mapping[str, object], who: Principal | None = None) -> Answer: ...
    def job_logs(
        self,
        name: str,
        rank: int | None = None,
        after_ns: int = 0,
        tail: int | None = None,
        who: Principal | None = None,
    ) -> LogPage: ...
    def cancel(self, name: str, who: Principal | None = None) -> JobView: ...
    def scale(self, name: str, gpus: int | None, who: Principal | None = None) -> JobDetail: ...
    def migrate(self, name: str, node: str, who: Principal | None = None) -> JobDetail: ...
    def drain(self, node: str, force: bool = False, who: Principal | None = None) -> NodeView: ...
    def undrain(self, node: str, who: Principal | None = None) -> NodeView: ...
    def nodes(self, who: Principal | None = None) -> list[NodeView]: ...
    def node(self, name: str, who: Principal | None = None) -> NodeView: ...
    def refused(self, reason: str) -> None: ...
    def ingest_measurements(self, body: Mapping[str, object]) -> dict[str, object]: ...


_JSON = "application/json"
_WITH_BODY = ("POST", "PUT", "PATCH")


def _parse_body(raw: bytes, content_type: str) -> object:
    """A request body as YAML (``*yaml*`` content types) or JSON."""
    if not raw.strip():
        raise ApiError(HTTPStatus.BAD_REQUEST, "empty body")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise ApiError(HTTPStatus.BAD_REQUEST, "body is not UTF-8") from None
    if "yaml" in content_type.lower():
        try:
            return safe_load_yaml(text)  # "[[[[..." too deep is a YAMLError there
        except yaml.YAMLError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"invalid YAML: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(HTTPStatus.BAD_REQUEST, "invalid JSON: nested too deeply") from None


def _job_of(path: str) -> str | None:
    """The job a ``/api/v1/jobs/{name}[/logs]`` path names (at most 64 characters)."""
    prefix = "/api/v1/jobs/"
    if not path.startswith(prefix):
        return None
    return unquote(path[len(prefix) :]).removesuffix("/logs")[:64] or None


class _Handler(BaseHTTPRequestHandler):
    """The routes of the allocator; ``_handler_class`` binds the service and credentials."""

    server_version = "flowcon-allocator/1"
    protocol_version = "HTTP/1.1"
    service: Service
    credentials: Credentials
    timeout = 60  # seconds a connection may idle (or hold its TLS handshake) before it closes
    _length = 0  # the request body's declared size, until the route reads it
    _who: Principal | None = None  # the caller, once authorised
    _role: Role = "public"  # the role the route needs
    _audit_job: str | None = None  # the job a call is about (audit log)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # -- helpers ----------------------------------------------------------------------

    def _send(self, status: int, body: object, content_type: str = _JSON) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorise(self, method: str, path: str) -> None:
        """401 without a known token, 403 when the token lacks the route's role."""
        self._role = required_role(method, path)
        self._who = self.credentials.principal(self.headers.get("Authorization"))
        status = self.credentials.allows(self._who, self._role)
        if status == 401:
            raise ApiError(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
        if status == 403:
            raise ApiError(HTTPStatus.FORBIDDEN, "this token may not do that")

    def _declared_length(self, method: str) -> int:
        """The body's Content-Length, checked before anything is read."""
        raw = self.headers.get("Content-Length")
        if raw is None:
            if method in _WITH_BODY:
                raise ApiError(HTTPStatus.LENGTH_REQUIRED, "Content-Length required")
            return 0
        try:
            length = int(raw)
        except ValueError:
            raise ApiError(HTTPStatus.BAD_REQUEST, "bad Content-Length") from None
        if length < 0:
            raise ApiError(HTTPStatus.BAD_REQUEST, "bad Content-Length")
        if length > MAX_BODY:
            raise ApiError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} bytes", limit=MAX_BODY
            )
        return length

    def _body(self) -> object:
        raw = self.rfile.read(self._length) if self._length > 0 else b""
        self._length = 0
        return _parse_body(raw, self.headers.get("Content-Type") or _JSON)

    def _route(self, method: str) -> None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        self._length = 0
        self._who = None
        self._audit_job = _job_of(path)
        try:
            try:
                self._authorise(method, path)
                self._length = self._declared_length(method)
            except ApiError:
                # Refused without reading the body; the connection is closed after.
                self.close_connection = True
                raise
            status, body, ctype = self._dispatch(method, path)
        except ApiError as exc:
            status, body, ctype = exc.status, exc.body, _JSON
        except Exception as exc:  # a bug must not kill the server thread
            status, body, ctype = _failure(method, path, exc)
        if self._length > 0:
            self.close_connection = True  # a body the route did not read
        self._audit(method, path, status, body)
        self._send(status, body, ctype)

    def _audit(self, method: str, path: str, status: int, body: object) -> None:
        """One audit line for a change or a refusal (flowcon/allocator/audit.py)."""
        if not audit.audited(method, path, status):
            return
        reason = audit.refusal_reason(status, body if isinstance(body, dict) else {})
        who = self._who.name if self._who is not None else None
        source = str(self.client_address[0]) if self.client_address else ""
        audit.record(who, self._role, source, method, path, self._audit_job, status, reason)
        if reason:
            self.service.refused(reason)

    # -- routes -----------------------------------------------------------------------

    def _dispatch(self, method: str, path: str) -> Reply:
        if path == "/healthz" and method == "GET":
            health = self.service.health()
            return (200 if health.get("status") == "ok" else 503), health, _JSON
        view = self._view(method, path)
        if view is not None:
            return view
        if path == "/metrics" and method == "GET":
            return 200, self.service.metrics_text(), "text/plain; version=0.0.4; charset=utf-8"
        if path == "/api/v1/jobs":
            return self._jobs(method)
        if path == "/api/v1/whoami" and method == "GET" and self._who is not None:
            who = self._who
            return 200, {"name": who.name, "roles": sorted(who.roles)}, _JSON
        if path.startswith("/api/v1/jobs/"):
            return self._job(method, unquote(path[len("/api/v1/jobs/") :]))
        if path == "/api/v1/measurements":
            return self._measurements(method)
        if path == "/api/v1/nodes" or path.startswith("/api/v1/nodes/"):
            return self._nodes(method, unquote(path[len("/api/v1/nodes") :]).lstrip("/"))
        raise ApiError(404, "no such route")

    def _nodes(self, method: str, rest: str) -> Reply:
        """GET /api/v1/nodes[/NODE]; POST /api/v1/nodes/NODE/drain (``{"force": true}``
        gives up guarantees) and /undrain."""
        if not rest:
            if method != "GET":
                raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed here")
            return 200, [n.to_json() for n in self.service.nodes(self._who)], _JSON
        node, _, action = rest.partition("/")
        if not node or "/" in action:
            raise ApiError(404, "no such route")
        if not action:
            if method != "GET":
                raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed here")
            return 200, self.service.node(node, self._who).to_json(), _JSON
        if method != "POST":
            raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed here")
        if action == "drain":
            body = self._optional_body()
            force = body.get("force", False)
            if not isinstance(force, bool):
                raise ApiError(400, "force must be true or false", field="force")
            return 200, self.service.drain(node, force, self._who).to_json(), _JSON
        if action == "undrain":
            self._optional_body()
            return 200, self.service.undrain(node, self._who).to_json(), _JSON
        raise ApiError(404, "no such route")

    def _optional_body(self) -> dict[str, object]:
        """A JSON object body, or {} when the request has none."""
        if self._length <= 0:
            return {}
        body = self._body()
        if not isinstance(body, dict):
            raise ApiError(400, "body must be a JSON object")
        return body

    def _operation(self, method: str, name: str, action: str) -> Reply:
        """POST /api/v1/jobs/NAME/scale ``{"gpus": N}`` or ``{"auto": true}``;
        POST /api/v1/jobs/NAME/migrate ``{"node": NODE}``."""
        if method != "POST":
            raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed here")
        body = self._optional_body()
        if action == "scale":
            gpus, auto = body.get("gpus"), body.get("auto", False)
            if auto is True and gpus is None:
                return 200, self.service.scale(name, None, self._who).to_json(), _JSON
            if auto not in (False, None) or not isinstance(gpus, int) or isinstance(gpus, bool):
                raise ApiError(
                    400, 'scale needs {"gpus": N} (an integer) or {"auto": true}', field="gpus"
                )
            return 200, self.service.scale(name, gpus, self._who).to_json(), _JSON
        node = body.get("node")
        if not isinstance(node, str) or not node:
            raise ApiError(400, 'migrate needs {"node": NAME}', field="node")
        return 200, self.service.migrate(name, node, self._who).to_json(), _JSON

    def _view(self, method: str, path: str) -> Reply | None:
        """The live view: its page and files, and the history it polls."""
        if method != "GET":
            return None
        if path == "/api/v1/history":
            query = parse_qs(urlsplit(self.path).query)
            try:
                since = float(query["since"][0]) if query.get("since") else None
            except ValueError:
                raise ApiError(400, "since must be a Unix time", field="since") from None
            return 200, self.service.history(since), _JSON
        return static_response(path, "allocator.html")

    def _jobs(self, method: str) -> Reply:
        if method == "GET":
            return 200, self.service.jobs_body(self._who), _JSON
        if method == "POST":
            body = self._body()
            if isinstance(body, dict) and isinstance(body.get("spec"), dict):
                body = body["spec"]
            if not isinstance(body, dict):
                raise ApiError(400, "job spec must be a mapping", field="")
            name = body.get("name")
            self._audit_job = name[:64] if isinstance(name, str) else None
            if self._flag("dry_run"):
                return 200, self.service.dry_run(body, self._who).to_json(), _JSON
            status, out = self.service.submit(body, self._who)
            return status, out.to_json(), _JSON
        raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed here")

    def _query(self) -> dict[str, str]:
        return {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}

    def _flag(self, key: str) -> bool:
        value = self._query().get(key, "false").lower()
        if value not in ("true", "1", "false", "0", ""):
            raise ApiError(400, f"{key} must be true or false", field=key)
        return value in ("true", "1")

    def _int_arg(self, key: str, minimum: int = 0) -> int | None:
        raw = self._query().get(key)
        if raw is None or raw == "":
            return None
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(400, f"{key} must be an integer", field=key) from None
        if value < minimum:
            raise ApiError(400, f"{key} must be >= {minimum}", field=key)
        return value

    def _logs(self, method: str, name: str) -> Reply:
        if method != "GET":
            raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed here")
        after = self._int_arg("after") or 0
        rank, tail = self._int_arg("rank"), self._int_arg("tail")
        out = self.service.job_logs(name, rank, after, tail, self._who)
        return 200, out.to_json(), _JSON

    def _job(self, method: str, name: str) -> Reply:
        if name.endswith("/logs") and "/" not in name[: -len("/logs")]:
            return self._logs(method, name[: -len("/logs")])
        for action in ("scale", "migrate"):
            suffix = "/" + action
            if name.endswith(suffix) and name[: -len(suffix)] and "/" not in name[: -len(suffix)]:
                return self._operation(method, name[: -len(suffix)], action)
        if not name or "/" in name:
            raise ApiError(404, "no such route")
        if method == "GET":
            return 200, self.service.get_job(name, self._who).to_json(), _JSON
        if method == "DELETE":
            return 200, self.service.cancel(name, self._who).to_json(), _JSON
        raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed here")

    def _measurements(self, method: str) -> Reply:
        if method == "POST":
            body = self._body()
            if not isinstance(body, dict):
                raise ApiError(400, "measurement body must be a JSON object")
            return 200, self.service.ingest_measurements(body), _JSON
        raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed here")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_PATCH(self) -> None:
        self._route("PATCH")


def _handler_class(
    service: Service, credentials: Credentials | str
) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to ``service`` and its credentials (a plain string:
    the operator token alone)."""
    if isinstance(credentials, str):
        credentials = Credentials(operator=credentials)
    attrs = {"service": service, "credentials": credentials}
    return type("Handler", (_Handler,), attrs)


class _Server(ThreadingHTTPServer):
    """The threading server, quiet about connections that fail before a request (a
    plain-HTTP client on the TLS port, a scanner): one debug line, no traceback. Its
    listen backlog holds a burst of clients (the standard library's 5 resets the sixth
    while a planning round keeps the accepting thread from the interpreter)."""

    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)


class ApiServer:
    """The HTTP server on its own thread; ``port=0`` picks a free port."""

    def __init__(
        self,
        service: Service,
        token: Credentials | str,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ):
        """``tls``: serve https with this context (flowcon/tls.py). The handshake happens
        in the connection's own thread on its first read (``do_handshake_on_connect``
        off), so a client that never sends one cannot stall the accepting thread."""
        self.httpd = _Server((host, port), _handler_class(service, token))
        self.httpd.daemon_threads = True
        self.scheme = "https" if tls is not None else "http"
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(
                self.httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = str(self.httpd.server_address[0])
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"{self.scheme}://{host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="allocator-http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

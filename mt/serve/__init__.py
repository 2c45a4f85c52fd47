"""`mt serve`: a trained model behind HTTP (JSON API, LibreTranslate's API, a page at `/`).

`serve(...)` checks what it was given, builds the app (mt.serve.app) and runs it under uvicorn.
SIGTERM stops taking connections, lets the requests in flight finish, has the workers answer
what they queued, and returns, so the process exits 0.
"""

from __future__ import annotations

import errno
import signal
import socket
import sys
from pathlib import Path

from mt.decode_rules import validate_plan
from mt.errors import MtError
from mt.plan import PlanOptions
from mt.serve.config import ServeConfig
from mt.serve.limits import Limits
from mt.serve.security import LOOPBACK, read_keys


def parse_models(specs: list[str]) -> dict[str, list[Path]]:
    """`[NAME=]PATH[,PATH...]` per model; several paths make an ensemble. The default name is
    the run directory's (for `run/best.pt` or `run`) or the file's stem."""
    models: dict[str, list[Path]] = {}
    for spec in specs:
        name, sep, rest = spec.partition("=")
        if not sep:
            name, rest = "", spec
        paths = [Path(p) for p in rest.split(",") if p]
        if not paths:
            raise MtError(f"{spec!r}: no checkpoint path")
        for p in paths:
            if not p.exists():
                raise MtError(f"{p}: checkpoint not found")
        if not name:
            first = paths[0]
            name = first.name if first.is_dir() else first.parent.name or first.stem
            if first.is_file() and first.stem not in ("best", "last"):
                name = first.stem
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise MtError(f"{name!r}: a model name is letters, digits, '-', '_' and '.'")
        if name in models:
            raise MtError(f"two models are named {name!r}: name them, e.g. {name}2=PATH")
        models[name] = paths
    return models


def parse_adapters(specs: list[str], models: dict[str, list[Path]]) -> dict[str, dict[str, Path]]:
    """`[MODEL:]NAME=PATH` per adapter (`--adapter`), held on MODEL (default: the first
    model); an adapter applies to one checkpoint, so not to an ensemble. Whether it fits its
    model is checked when the model loads (its fingerprint)."""
    adapters: dict[str, dict[str, Path]] = {}
    first = next(iter(models))
    for spec in specs:
        head, sep, rest = spec.partition("=")
        if not sep or not rest:
            raise MtError(f"--adapter {spec!r}: give NAME=PATH (or MODEL:NAME=PATH)")
        model, colon, name = head.rpartition(":")
        model = model if colon else first
        if model not in models:
            raise MtError(f"--adapter {spec!r}: no model {model!r} (served: {', '.join(models)})")
        if len(models[model]) > 1:
            raise MtError(f"--adapter {spec!r}: model {model!r} is an ensemble")
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise MtError(f"--adapter {spec!r}: a name is letters, digits, '-', '_' and '.'")
        path = Path(rest)
        if not path.exists():
            raise MtError(f"{path}: adapter not found")
        if name in adapters.setdefault(model, {}):
            raise MtError(f"two adapters of model {model!r} are named {name!r}")
        adapters[model][name] = path
    return adapters


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here rather than by uvicorn, so a port in use is one line
    naming it (uvicorn logs several lines and exits 3) and no model is loaded for nothing."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn chooses
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
    try:
        sock.bind((host, port))
    except socket.gaierror as err:
        sock.close()
        raise MtError(f"--host {host}: {err.strerror}") from None
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise MtError(f"port {port} on {host} is in use: choose another with --port") from None
        raise MtError(f"cannot listen on {host}:{port}: {err.strerror}") from None
    sock.set_inheritable(True)
    return sock


def serve(
    checkpoints: list[str],
    host: str = "127.0.0.1",
    port: int = 8080,
    device: str = "cpu",
    api_key_file: Path | None = None,
    cors_origins: list[str] | None = None,
    limits: Limits | None = None,
    log_level: str = "info",
    start_line: str = "",
    dtype: str | None = None,
    plan: PlanOptions | None = None,
    adapters: list[str] | None = None,
) -> None:
    """Run the server until SIGTERM or Ctrl-C; `plan`: the steps around search of every
    request (mt.plan: the number guard, and a glossary file whose terms apply to the requests
    of its direction that give none, mt.serve.glossaries); `adapters`: `--adapter` values."""
    limits = limits or Limits()
    try:
        limits.check()
    except ValueError as err:
        raise MtError("--" + str(err).replace("_", "-")) from None
    if host not in LOOPBACK and api_key_file is None:
        raise MtError(
            f"--host {host} lets other machines in: give --api-key-file (or bind 127.0.0.1)"
        )
    if not 0 <= port < 65536:
        raise MtError(f"--port must be between 0 and 65535, got {port}")
    if dtype is not None:  # one line now, not a model that fails to load later
        from mt.device import resolve_decode_dtype, resolve_device

        resolve_decode_dtype(dtype, resolve_device(device), option="--dtype")
    # The options are checked first: a wrong one is the same line with the extra or without it.
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as err:
        raise MtError(f"mt serve needs {err.name}: pip install 'mt[serve]'") from None
    from mt.serve.app import create_app

    keys = read_keys(api_key_file) if api_key_file is not None else None
    plan = plan or PlanOptions()
    validate_plan(plan)
    own = None
    if plan.glossary is not None:  # read now: a bad file is one line before any model loads
        from mt.glossary.files import read_glossary
        from mt.serve.glossaries import Stored

        g = read_glossary(plan.glossary)
        own = Stored(str(plan.glossary), g.entries, g.src_lang, g.tgt_lang)
    models = parse_models(checkpoints)
    config = ServeConfig(
        models=models,
        device=device,
        limits=limits,
        api_keys=keys,
        cors_origins=cors_origins or [],
        dtype=dtype,
        plan=plan,
        own_glossary=own,
        adapters=parse_adapters(adapters or [], models),
    )
    listener = listen(host, port)  # before any model loads: a taken port is one line at once
    app = create_app(config)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list | None = None) -> None:
            await super().startup(sockets)
            if self.started and start_line:  # listening: errors before it stay one line
                print(start_line, file=sys.stderr, flush=True)

        def handle_exit(self, sig: int, frame: object) -> None:
            app.state.hurry()  # what is queued is answered now, not after its pooling wait
            super().handle_exit(sig, frame)  # type: ignore[arg-type]

    server = Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=60,
            timeout_keep_alive=75,  # longer than clients' idle pools keep a connection
            access_log=False,
        )
    )
    # uvicorn re-raises the signal that stopped it once it has shut down; with a handler of
    # our own in place for SIGTERM, that is a no-op and the process exits 0.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run(sockets=[listener])
    finally:
        signal.signal(signal.SIGTERM, previous)
        listener.close()
    if not server.started:
        raise MtError(f"could not listen on {host}:{port} (is the port in use?)")

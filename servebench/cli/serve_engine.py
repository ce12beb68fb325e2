"""``servebench serve-engine``: the local torch engine behind an OpenAI-compatible HTTP server."""

from __future__ import annotations

from typing import Optional

import typer

from servebench.cli.core import app, console, emit_json
from servebench.errors import ConfigError


@app.command("serve-engine")
def serve_engine(
    preset: str = typer.Option("tiny", help="Model preset (seeded random weights; tiny runs on a CPU)."),
    port: int = typer.Option(8000, min=0, max=65535, help="TCP port (0: a free one)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind (loopback by default)."),
    kv_budget_tokens: int = typer.Option(16_384, min=1, help="KV cache budget, tokens."),
    max_num_seqs: int = typer.Option(32, min=1, help="Most sequences running at once."),
    max_waiting: int = typer.Option(64, min=1, help="Bounded waiting queue: beyond it, HTTP 503."),
    max_num_batched_tokens: Optional[int] = typer.Option(None, min=1, help="Token budget per step "
                                                         "(prompts are chunked to fit); default: none."),
    policy: str = typer.Option("paged", help="KV admission policy: paged or reserve."),
    prefix_caching: bool = typer.Option(False, "--prefix-caching/--no-prefix-caching",
                                        help="Reuse the KV of cached full prompt blocks shared with earlier requests; "
                                             "usage.prompt_tokens_details.cached_tokens says how many."),
    timeout: Optional[float] = typer.Option(None, min=0.001, help="Server-side deadline per request, s."),
    seed: int = typer.Option(0, help="Seed of the weights and of drawn prompt ids."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    threads: Optional[int] = typer.Option(None, min=1, help="torch CPU threads."),
    read_timeout: float = typer.Option(30.0, min=0.001, help="A request's headers, then its body, must "
                                       "arrive within this many seconds (else 408 and the connection closes)."),
    reasoning_tokens: int = typer.Option(0, min=0, help="Every chat reply thinks this many tokens first, streamed "
                                         "as delta.reasoning_content like a reasoning model's (a request's "
                                         "reasoning.tokens wins; 0: no reasoning)."),
    as_json: bool = typer.Option(False, "--json", help="Print the server's address and limits as JSON, once "
                                 "it accepts requests."),
) -> None:
    """Serve the local engine on /v1/completions and /v1/chat/completions (SSE, one token per chunk).

    The address is printed once the engine has warmed up and the socket listens.
    """
    from pydantic import ValidationError

    from servebench.capacity.documents import validation_line
    from servebench.dashboard.sharing import is_loopback
    from servebench.serving.engine.http_api import create_app
    from servebench.serving.engine.http_server import bind_socket, http_url, make_server
    from servebench.serving.engine.service import EngineService
    from servebench.serving.scheduler import SchedulerConfig

    if not is_loopback(host):  # stderr, so --json output on stdout stays one object
        typer.echo(f"warning: --host {host} serves the engine beyond this machine: anyone who can reach "
                   "this address can send it requests. Leave --host out to keep it on 127.0.0.1.", err=True)
    if policy not in ("paged", "reserve"):
        raise ConfigError(f"--policy {policy!r}: expected paged or reserve")
    try:
        sched = SchedulerConfig(kv_budget_tokens=kv_budget_tokens, policy=policy, max_num_seqs=max_num_seqs,
                                max_num_batched_tokens=max_num_batched_tokens, max_waiting=max_waiting,
                                timeout_s=timeout, prefix_caching=prefix_caching)  # type: ignore[arg-type]
    except ValidationError as exc:  # e.g. a paged budget smaller than one block
        raise ConfigError(validation_line("serve-engine options", exc)) from None
    service = EngineService(preset, scheduler=sched, seed=seed, device=device, threads=threads)
    application = create_app(service, body_timeout_s=read_timeout, reasoning_tokens=reasoning_tokens)
    sock = bind_socket(host, port)  # bound now, so --port 0 prints the port it got
    port = sock.getsockname()[1]
    model_id = f"servebench-{service.model.config.name}"
    info = {"url": http_url(host, port), "model": model_id, "device": str(service.model.device),
            "kv_budget_tokens": kv_budget_tokens, "max_num_seqs": max_num_seqs, "max_waiting": max_waiting,
            "max_num_batched_tokens": max_num_batched_tokens, "policy": policy, "timeout_s": timeout,
            "read_timeout_s": read_timeout, "prefix_caching": prefix_caching, "reasoning_tokens": reasoning_tokens}

    def announce() -> None:  # called once the engine is warm and the socket listens
        if as_json:
            emit_json(info)
            return
        from servebench.output.safetext import safe_markup

        console.print(f"serving [bold]{safe_markup(model_id)}[/] on {safe_markup(str(info['url']))} ({info['device']}; "
                      f"KV {kv_budget_tokens} tokens, {max_num_seqs} seqs, queue {max_waiting}); Ctrl-C stops")

    try:
        make_server(application, sock, read_timeout_s=read_timeout, on_ready=announce).run(sockets=[sock])
    finally:
        sock.close()

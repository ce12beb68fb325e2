"""Request bodies of the OpenAI-compatible API: strict types, the prompt's tokens, sampling and logprob options.

Every problem is a :class:`~servebench.serving.engine.request_rules.BadRequest` naming the parameter.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servebench.serving.engine.logprobs import MAX_LOGPROBS, LogprobRecorder
from servebench.serving.engine.model import SamplingParams
from servebench.serving.engine.request_rules import BadRequest, check_implemented, check_unicode, shown
from servebench.serving.engine.words import StopStrings, decode, word_ids

MAX_STOP_SEQUENCES = 4  # as OpenAI
MAX_STOP_CHARS = 256  # each stop sequence is matched after every token on the engine thread, at a cost that grows with it
MAX_LOGIT_BIAS = 300  # tokens one logit_bias may name, as OpenAI


class _Strict(BaseModel):
    """Strict types (no "3" for 3, no true for 1); unknown fields are ignored, as OpenAI servers do."""

    model_config = ConfigDict(extra="ignore", strict=True)


class TextPart(_Strict):
    """A chat content part; the engine reads text only."""

    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    """One chat message: a role and text content (a string, text parts, or none)."""

    role: str
    content: str | list[TextPart] | None = None


class ReasoningOption(_Strict):
    """servebench's request extension: think ``tokens`` tokens before the answer (chat only), as a reasoning model does."""

    tokens: int = Field(ge=0)


class StreamOptions(_Strict):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM's: usage, counted so far, in every chunk


class CompletionBody(_Strict):
    """The fields of an OpenAI completion or chat request that the engine uses, strictly typed."""

    model: str | None = None
    prompt: str | list[int] | list[str] | None = None
    messages: list[ChatMessage] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1)
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)
    stop: str | list[str] | None = None
    ignore_eos: bool | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | int | None = None  # chat: true or false; completions: how many alternatives (0 to 20)
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)  # chat only
    echo: bool | None = None  # completions only: the prompt's text before the reply's
    min_tokens: int | None = Field(None, ge=0)  # vLLM's; accepted only where it changes nothing (check_min_tokens)
    user: str | None = None
    reasoning: ReasoningOption | None = None  # the reply's first tokens are reasoning (servebench's own field)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.continuous_usage_stats)

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


def _is_union_tag(part: object) -> bool:
    """Return True for the parts of a pydantic error location that name a union branch, not a field."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "none") or "[" in part
                                      or part[:1].isupper())


def parse_body(raw: bytes) -> CompletionBody:
    """Parse and strictly validate a request body; raise BadRequest saying what is wrong."""

    def no_constant(name: str) -> float:
        raise ValueError(f"{name} is not valid JSON")

    try:
        doc = json.loads(raw, parse_constant=no_constant)
    except RecursionError:
        raise BadRequest("the request body is nested too deeply", "invalid_json") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
        raise BadRequest(f"the request body is not valid JSON: {exc}", "invalid_json") from None
    check_unicode(doc)
    if isinstance(doc, dict):
        check_implemented(doc)
    try:
        return CompletionBody.model_validate(doc)
    except ValidationError as exc:
        # the most specific error names the field best: in a union, the branch that got furthest
        worst = max(exc.errors(), key=lambda e: len(e["loc"]))
        param = ".".join(str(p) for p in worst["loc"] if not _is_union_tag(p)) if isinstance(doc, dict) else None
        raise BadRequest(f"invalid request: {param or 'body'}: {worst['msg']}", "invalid_value", param) from None
    except RecursionError:
        raise BadRequest("the request body is nested too deeply", "invalid_json") from None


def prompt_ids(body: CompletionBody, chat: bool, vocab: int, max_positions: int) -> list[int]:
    """Return the prompt's token ids (one per word); raise BadRequest if there is none, or more than fit.

    A prompt must leave one of the model's ``max_positions`` for output: a longer one is refused
    before it is split into words, so a body of millions of words costs no more than the words that fit.
    """
    param = "messages" if chat else "prompt"
    limit = max_positions - 1
    if chat:
        if not body.messages:
            raise BadRequest("'messages' must be a non-empty list", param="messages")
        words: list[str] = []
        for m in body.messages:
            if isinstance(m.content, str):
                words.append(m.content)
            elif m.content is not None:
                words.extend(p.text for p in m.content)
        ids = _encode_within(" ".join(words), vocab, limit, param)
    elif body.prompt is None:
        raise BadRequest("'prompt' is required", param="prompt")
    elif isinstance(body.prompt, str):
        ids = _encode_within(body.prompt, vocab, limit, param)
    elif not body.prompt:
        ids = []
    elif all(isinstance(t, int) for t in body.prompt):
        ids = list(body.prompt)  # type: ignore[arg-type]
        if len(ids) > limit:
            raise _too_long(limit, param)
        if any(not 0 <= t < vocab for t in ids):
            raise BadRequest(f"prompt token ids must be in [0, {vocab})", param="prompt")
    elif len(body.prompt) == 1:
        ids = _encode_within(str(body.prompt[0]), vocab, limit, param)
    else:
        raise BadRequest("a batch of prompts is not supported; send one prompt per request", param="prompt")
    if not ids:
        raise BadRequest("the prompt is empty; the engine needs at least one token", param=param)
    return ids


def _encode_within(text: str, vocab: int, limit: int, param: str) -> list[int]:
    """Return :func:`encode` of ``text``, or raise BadRequest once it has more than ``limit`` words."""
    words = text.split(maxsplit=limit)  # at most limit + 1 pieces, the last holding the rest
    if len(words) > limit:
        raise _too_long(limit, param)
    return word_ids(words, vocab)


def _too_long(limit: int, param: str) -> BadRequest:
    return BadRequest(f"the prompt has more than {limit} tokens: with one output token it would exceed the "
                      f"model's {limit + 1} positions", "context_length_exceeded", param)


def prompt_text(body: CompletionBody, ids: list[int]) -> str:
    """Return the prompt as ``echo`` shows it: the text sent, or the token ids rendered as words."""
    if isinstance(body.prompt, str):
        return body.prompt
    if body.prompt and isinstance(body.prompt[0], str):
        return body.prompt[0]
    return "".join(decode(t) for t in ids)


def check_min_tokens(body: CompletionBody, max_tokens: int) -> None:
    """Refuse vLLM's ``min_tokens`` where it would change the reply: the engine does not implement it.

    It changes nothing at 0 or 1 (a reply has at least one token), nor with ``ignore_eos`` and no stop
    sequence, where every reply runs to ``max_tokens`` anyway (the fixed-length recipe of benchmark
    tools, which send both); above ``max_tokens`` it is a contradiction, as vLLM says too.
    """
    wanted = body.min_tokens or 0
    if wanted > max_tokens:
        raise BadRequest(f"min_tokens {wanted} is above max_tokens {max_tokens}", param="min_tokens")
    if wanted > 1 and not (body.ignore_eos and not body.stop_sequences):
        raise BadRequest("'min_tokens' is supported only where it changes nothing: with ignore_eos true and no stop "
                         "sequence every reply runs to max_tokens; leave it out, or send 0",
                         "unsupported_parameter", "min_tokens")


def logprob_alternatives(body: CompletionBody, chat: bool) -> int | None:
    """Return how many alternatives each token's logprobs should show, or None when none were asked for.

    Chat takes ``logprobs: true`` and ``top_logprobs: N``; completions ``logprobs: N`` and ``echo``
    (not both: echoed prompt tokens would need the prompt's logprobs, which the engine does not compute).
    """
    if chat:
        if body.echo:
            raise BadRequest("'echo' is not supported on chat completions", "unsupported_parameter", "echo")
        if body.logprobs is not None and not isinstance(body.logprobs, bool):
            raise BadRequest(f"invalid request: logprobs: chat takes true or false (and top_logprobs for "
                             f"alternatives), got {shown(body.logprobs)}", param="logprobs")
        if body.top_logprobs is not None and not body.logprobs:
            raise BadRequest("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        return (body.top_logprobs or 0) if body.logprobs else None
    if body.top_logprobs is not None:
        raise BadRequest("'top_logprobs' is a chat parameter; completions take 'logprobs': N", param="top_logprobs")
    if body.logprobs is None:
        return None
    if isinstance(body.logprobs, bool) or not 0 <= body.logprobs <= MAX_LOGPROBS:
        raise BadRequest(f"invalid request: logprobs: completions take a number of alternatives from 0 to "
                         f"{MAX_LOGPROBS}, got {shown(body.logprobs)}", param="logprobs")
    if body.echo:
        raise BadRequest("'echo' with 'logprobs' needs the prompt's logprobs, which this server does not compute; "
                         "ask for one of them", "unsupported_parameter", "echo")
    return body.logprobs


def sampling_params(body: CompletionBody, vocab: int, on_logits: LogprobRecorder | None = None) -> SamplingParams:
    """Return the engine's sampling for a request with the API's defaults (temperature 1, top_p 1).

    ``on_logits`` records each generated token's logprobs, when the request asked for them.
    """
    stops = body.stop_sequences
    if len(stops) > MAX_STOP_SEQUENCES:
        raise BadRequest(f"'stop' takes at most {MAX_STOP_SEQUENCES} sequences, got {len(stops)}", param="stop")
    if any(s == "" for s in stops):
        raise BadRequest("a stop sequence must not be empty", param="stop")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        longest = max(len(s) for s in stops)
        raise BadRequest(f"a stop sequence may hold at most {MAX_STOP_CHARS} characters, got {longest}", param="stop")
    if len(body.logit_bias or {}) > MAX_LOGIT_BIAS:
        raise BadRequest(f"'logit_bias' may name at most {MAX_LOGIT_BIAS} tokens, got {len(body.logit_bias or {})}",
                         param="logit_bias")
    bias: list[tuple[int, float]] = []
    for key, value in (body.logit_bias or {}).items():
        if not (key.isascii() and key.isdigit() and len(key) <= len(str(vocab)) and int(key) < vocab):
            raise BadRequest(f"logit_bias key {shown(key)} is not a token id in [0, {vocab})", param="logit_bias")
        if not -100 <= value <= 100:
            raise BadRequest(f"logit_bias value {value} for token {key} is outside [-100, 100]", param="logit_bias")
        bias.append((int(key), float(value)))
    return SamplingParams(temperature=1.0 if body.temperature is None else body.temperature,
                          top_p=1.0 if body.top_p is None else body.top_p, seed=body.seed,
                          ignore_eos=bool(body.ignore_eos), logit_bias=tuple(bias),
                          stop=StopStrings(stops) if stops else None, on_logits=on_logits)

"""Which litellm arguments a room spec may set in an agent's ``litellm_kwargs``.

A spec is stored in Redis, readable by anyone who can read Redis, and whatever it sets is
sent by a worker to a model provider. So a spec sets only arguments that shape the
model's output (an allow-list; every other argument is refused with the list), and never
a credential: header and body names that look like one (key, token, auth, cookie,
secret, password, session, signature, credential, subscription), values that look like
one (``Bearer ...``, ``Basic ...``, ``sk-...``), and URLs carrying ``user:password@`` are
refused at any depth, lists included. Keys stay in the workers' environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

ALLOWED_ARGS = frozenset({
    # sampling
    "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "seed", "logit_bias", "stop",
    # the reply
    "max_completion_tokens", "logprobs", "top_logprobs", "parallel_tool_calls",
    "reasoning_effort", "thinking", "verbosity",
    # routing and accounting that carry no secret
    "api_version", "service_tier", "prompt_cache_key", "user", "drop_params",
    "input_cost_per_token", "output_cost_per_token",
    # extra request parts, mappings only, checked for credentials
    "extra_headers", "extra_body",
    # litellm's offline mocks: the call never leaves the worker
    "mock_response", "mock_tool_calls", "mock_timeout",
})
# litellm arguments with their own AgentSpec field, and those the respond protocol owns.
OWN_FIELDS = {"model": "model", "temperature": "temperature", "max_tokens": "max_tokens",
              "api_base": "api_base", "base_url": "api_base", "api_key": "api_key_env",
              "timeout": "timeout_s", "request_timeout": "timeout_s"}
PROTOCOL_ARGS = frozenset({"messages", "tools", "tool_choice", "functions", "function_call",
                           "stream", "n", "num_retries", "max_retries"})
PRICE_ARGS = frozenset({"input_cost_per_token", "output_cost_per_token"})
NO_CREDENTIALS = ("never put credentials in a spec (Redis stores it); keep them in the "
                  "workers' environment (the key via api_key_env)")

# "tokens" is a count (max_tokens, budget_tokens), "token" a credential.
_CREDENTIAL_NAME = re.compile(
    r"key|token(?!s)|auth|cookie|secret|passw|pwd|session|signature|credential|subscription"
    r"|bearer",
    re.IGNORECASE,
)
_AUTH_SCHEME = re.compile(r"^\s*(bearer|basic|digest)\s+\S", re.IGNORECASE)
_SECRET_SHAPE = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{16,}"  # OpenAI, Anthropic, DeepSeek ... secret keys
    r"|\b(ghp|gho|ghu|ghs|ghr|github_pat|hf)_[A-Za-z0-9_]{16,}"  # GitHub, Hugging Face
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key id
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}"  # a JWT
)
_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s?#]*@")


def check_litellm_kwargs(kwargs: dict[str, Any]) -> None:
    """Raise ValueError, one line, for the first argument a spec may not set, or the first
    credential found in the ones it may."""
    for name, value in kwargs.items():
        _check_name(name)
        found = next(credentials_in(value, name), "")
        if found:
            raise ValueError(f"{found!r}: {NO_CREDENTIALS}")
    _check_mapping(kwargs, "extra_headers", "header names to text values", str)
    _check_mapping(kwargs, "extra_body", "field names to values", object)
    for name in PRICE_ARGS & kwargs.keys():
        price = kwargs[name]
        if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
            raise ValueError(f"{name!r} must be a number of US dollars, 0 or more")


def _check_name(name: str) -> None:
    if name in ALLOWED_ARGS:
        return
    if _CREDENTIAL_NAME.search(name):
        raise ValueError(f"{name!r}: {NO_CREDENTIALS}")
    if name in OWN_FIELDS:
        raise ValueError(f"{name!r}: set the agent's {OWN_FIELDS[name]} field instead")
    if name in PROTOCOL_ARGS:
        raise ValueError(f"{name!r} is set by parley for the respond protocol")
    raise ValueError(f"{name!r} is not a litellm argument a spec may set; allowed: "
                     f"{', '.join(sorted(ALLOWED_ARGS))}")


def _check_mapping(kwargs: dict[str, Any], name: str, shape: str, value_type: type) -> None:
    if name not in kwargs:
        return
    value = kwargs[name]
    if not isinstance(value, dict) or not all(isinstance(item, value_type) for item in value.values()):
        raise ValueError(f"{name!r} must be a mapping of {shape}")


def credentials_in(value: Any, path: str) -> Iterator[str]:
    """Where, at any depth of ``value`` (mappings and lists), a name or a text looks like a
    credential: each as a path such as ``extra_headers.X-Api-Key``."""
    if isinstance(value, dict):
        for name, item in value.items():
            where = f"{path}.{name}"
            if _CREDENTIAL_NAME.search(str(name)):
                yield where
            yield from credentials_in(item, where)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from credentials_in(item, f"{path}[{index}]")
    elif isinstance(value, str) and looks_like_credential(value):
        yield path


def looks_like_credential(text: str) -> bool:
    """True for an Authorization value, a well-known secret key's shape, or a URL with
    ``user:password@`` in it."""
    return bool(_AUTH_SCHEME.search(text) or _SECRET_SHAPE.search(text)
                or _USERINFO.search(text))


def url_credentials(url: str) -> str:
    """What in ``url`` is a credential (its userinfo, or a query parameter named like
    one); empty when there is none."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return "user:password@"
    return next((f"?{name}=" for name, _ in parse_qsl(parts.query, keep_blank_values=True)
                 if _CREDENTIAL_NAME.search(name)), "")

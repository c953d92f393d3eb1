"""Which of the worker's keys an agent's call may carry, and where to.

A spec is data written by whoever creates rooms; the keys are the workers' operator's. So:

======================================================  =====================================
the agent's spec                                         the call
======================================================  =====================================
``api_key_env`` not in PARLEY_WORKER_KEY_ENVS            refused (KeyEnvNotAllowed), no call
no ``api_base`` (the provider's default endpoint)        the key from ``api_key_env``, or none
                                                         and litellm reads the provider's own;
                                                         the room's organization's own value
                                                         (``PARLEY_ORG_<ORG>_<api_key_env>``)
                                                         first, where the worker has one
``api_base`` under PARLEY_WORKER_ALLOWED_API_BASES       the same
any other ``api_base``                                   no key: NO_KEY in its place, so that
                                                         litellm reads no variable either
a ``litellm_kwargs`` endpoint (``aws_bedrock_runtime_    refused (ApiBaseNotAllowed) unless
endpoint``, ...) outside the allowed bases               the value is under an allowed base
======================================================  =====================================

Nothing here imports litellm: the recorded error of every bid, scripted ones too, is passed
through ``redact_keys``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from parley.shared.api_bases import display_base, is_allowed_base
from parley.shared.models import DEFAULT_ORGANIZATION, AgentSpec
from parley.shared.organizations import ORG_KEY_PREFIX, key_variable
from parley.shared.settings import DEFAULT_WORKER_KEY_ENVS, Settings

# Sent in place of a key to a base that may not receive one. Given explicitly, it stops
# litellm from reading the provider's variable (OPENAI_API_KEY ...) and sending that instead;
# local model servers that need no key ignore it.
NO_KEY = "no-key-for-this-api-base"
# Shorter values are not worth redacting from error text: they would mangle it.
MIN_REDACTED_CHARS = 8
REDACTED = "[redacted]"
# litellm arguments that send a call somewhere other than api_base, with the worker's own
# credentials (bedrock's aws_bedrock_runtime_endpoint signs with its AWS keys, with or
# without api_base): each is an API base too.
_ENDPOINT_ARGUMENT = re.compile(r"endpoint|url|host|proxy", re.IGNORECASE)


class KeyRefusal(RuntimeError):
    """A call refused for the key variable the agent names (``variable``: it travels with
    the failed answer as its ``error_variable``, so its fix can name it)."""

    def __init__(self, message: str, variable: str = "") -> None:
        super().__init__(message)
        self.variable = variable


class MissingApiKey(KeyRefusal):
    """The environment variable the agent names for its key is not set on this worker."""


class KeyEnvNotAllowed(KeyRefusal):
    """The agent names a key variable outside PARLEY_WORKER_KEY_ENVS."""


class ApiBaseNotAllowed(RuntimeError):
    """The agent's api_base may not receive a key (PARLEY_WORKER_ALLOWED_API_BASES), and the
    call cannot be made without one."""


@dataclass(frozen=True)
class Credential:
    """What the call carries: ``api_key`` None lets litellm read the provider's own variable;
    ``withheld`` means the base may not receive a key and ``api_key`` is NO_KEY."""

    api_key: str | None
    withheld: bool = False


def credential_for(agent: AgentSpec, settings: Settings,
                   organization: str = DEFAULT_ORGANIZATION) -> Credential:
    """The credential the agent's call, in a room of ``organization``, may carry under this
    worker's ``settings``; KeyEnvNotAllowed or MissingApiKey when the spec asks for a key
    it does not lend."""
    check_endpoint_arguments(agent, settings)
    if agent.api_key_env is not None and agent.api_key_env not in settings.worker_key_envs:
        raise KeyEnvNotAllowed(
            f"api_key_env {agent.api_key_env} is not one of the key variables this worker "
            "lends to specs (PARLEY_WORKER_KEY_ENVS)", agent.api_key_env)
    if agent.api_base is not None and not is_allowed_base(
            agent.api_base, settings.worker_allowed_api_bases):
        return Credential(NO_KEY, withheld=True)
    return Credential(read_api_key(agent, organization))


def check_endpoint_arguments(agent: AgentSpec, settings: Settings) -> None:
    """Raise ApiBaseNotAllowed for a litellm argument naming an endpoint that is not under
    an allowed base (its value is not repeated: it may hold credentials)."""
    for name, value in agent.litellm_kwargs.items():
        if _ENDPOINT_ARGUMENT.search(name) and not (
                isinstance(value, str) and is_allowed_base(value, settings.worker_allowed_api_bases)):
            raise ApiBaseNotAllowed(
                f"litellm_kwargs.{name} points the call at an endpoint outside "
                "PARLEY_WORKER_ALLOWED_API_BASES, where it may not take the worker's credentials")


def read_api_key(agent: AgentSpec, organization: str = DEFAULT_ORGANIZATION) -> str | None:
    """The key from the variable the agent names, read now (keys rotate): the
    organization's own value of it when the worker has one, so that the organization's
    calls are billed to its key, else the cluster's; None when the agent names none and
    litellm reads the provider's default variable itself."""
    if agent.api_key_env is None:
        return None
    own = os.environ.get(key_variable(organization, agent.api_key_env), "").strip()
    value = own or os.environ.get(agent.api_key_env, "").strip()
    if not value:
        raise MissingApiKey(f"environment variable {agent.api_key_env} is not set",
                            agent.api_key_env)
    return value


def withheld_refusal(agent: AgentSpec, reason: str) -> ApiBaseNotAllowed:
    """The error for a call at a base that may not receive a key, which cannot go without."""
    return ApiBaseNotAllowed(
        f"{display_base(agent.api_base or '')} {reason}; this worker sends keys only to the "
        "API bases in PARLEY_WORKER_ALLOWED_API_BASES")


def redact_keys(text: str, settings: Settings) -> str:
    """``text`` with the value of every key variable this worker lends (its ``settings``),
    or litellm reads by default, replaced: a provider echoing a key back must not get it
    into Redis or the logs."""
    lent = (*settings.worker_key_envs, *DEFAULT_WORKER_KEY_ENVS)
    own = [name for name in os.environ if name.startswith(ORG_KEY_PREFIX)
           and name.endswith(tuple(f"_{variable}" for variable in lent))]
    for name in dict.fromkeys((*lent, *own)):
        value = os.environ.get(name, "").strip()
        if len(value) >= MIN_REDACTED_CHARS and value in text:
            text = text.replace(value, REDACTED)
    return text

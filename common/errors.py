"""Errors that end one request, each carrying the Triton error code the client should see."""

from __future__ import annotations

import enum

from .vocabulary import Outcome


class ErrorCode(enum.Enum):
    """Names of `pb_utils.TritonError` codes (resolved in the adapter, so this module stays pure)."""

    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    CANCELLED = "CANCELLED"
    INTERNAL = "INTERNAL"


class RequestError(Exception):
    """A request cannot be served; the message is sent to the client as is."""

    code = ErrorCode.INTERNAL
    outcome = Outcome.FAILED  # how the request is counted (vllm_triton_requests_finished_total's outcome)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(RequestError):
    """The client sent something wrong: the message names the field, the problem and what is allowed."""

    code = ErrorCode.INVALID_ARG
    outcome = Outcome.REJECTED


class EngineUnavailable(RequestError):
    """The engine cannot serve (dead, hung, restarting or shutting down)."""

    code = ErrorCode.UNAVAILABLE


class EngineBusy(RequestError):
    """A healthy engine did not take this request (its queue is full, or it is paused): a retry may succeed.

    Not an engine fault: it counts as `refused`, not `failed`, and the health monitor never sees it."""

    code = ErrorCode.UNAVAILABLE
    outcome = Outcome.REFUSED


class RequestCancelled(RequestError):
    code = ErrorCode.CANCELLED
    outcome = Outcome.CANCELLED

    @classmethod
    def by_client(cls) -> RequestCancelled:
        """The official backend's sentence first ("Request was cancelled"): its clients and tests match it."""
        return cls("Request was cancelled by the client")


class ConfigError(Exception):
    """The model's configuration is wrong: the model load fails with this message."""


class InternalError(RequestError):
    """Something unexpected inside the backend; the details are in the server log, under the request id."""

    code = ErrorCode.INTERNAL

"""Errors that end one request, each carrying the Triton error code the client should see."""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    """Names of `pb_utils.TritonError` codes (resolved in the adapter, so this module stays pure)."""

    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    CANCELLED = "CANCELLED"
    INTERNAL = "INTERNAL"


class RequestError(Exception):
    """A request cannot be served; the message is sent to the client as is."""

    code = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(RequestError):
    """The client sent something wrong: the message names the field, the problem and what is allowed."""

    code = ErrorCode.INVALID_ARG


class EngineUnavailable(RequestError):
    """The engine cannot serve (dead, hung, restarting or shutting down)."""

    code = ErrorCode.UNAVAILABLE


class RequestCancelled(RequestError):
    code = ErrorCode.CANCELLED


class ConfigError(Exception):
    """The model's configuration is wrong: the model load fails with this message."""


class InternalError(RequestError):
    """Something unexpected inside the backend; the details are in the server log, under the request id."""

    code = ErrorCode.INTERNAL

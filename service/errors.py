"""One typed error hierarchy for the whole service, mapped once to each API dialect (see api/errors.py)."""

from __future__ import annotations


class ServiceError(Exception):
    """Base: `status` is the HTTP status; the dialect fields name the error in each API's vocabulary."""

    status = 500
    openai_type, openai_code = "server_error", None
    anthropic_type = "api_error"
    retry_after: float | None = None
    retryable = False  # SDKs retry 5xx by default; we say `x-should-retry: false` unless this is True

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class BadRequest(ServiceError):
    status = 400
    openai_type, openai_code = "invalid_request_error", None
    anthropic_type = "invalid_request_error"


class Unauthorized(ServiceError):
    status = 401
    openai_type, openai_code = "invalid_request_error", "invalid_api_key"
    anthropic_type = "authentication_error"


class NotFound(ServiceError):
    status = 404
    openai_type, openai_code = "invalid_request_error", "not_found"
    anthropic_type = "not_found_error"


class ModelNotFound(NotFound):
    openai_code = "model_not_found"


class ModelNotDownloaded(ModelNotFound):
    """Cataloged (or a valid repo id) but not on this machine: the message says how to pull it."""


class PayloadTooLarge(ServiceError):
    status = 413
    openai_type, openai_code = "invalid_request_error", "request_too_large"
    anthropic_type = "request_too_large"


class UnsupportedModel(BadRequest):
    """The catalog knows the model, but this service cannot run its kind yet (e.g. vision)."""


class MemoryBudgetExceeded(ServiceError):
    status = 507
    openai_code = "insufficient_memory"


class LoadFailed(ServiceError):
    status = 500
    openai_code = "model_load_failed"


class QueueFull(ServiceError):
    status = 503
    openai_code = "server_busy"
    anthropic_type = "overloaded_error"
    retryable = True

    def __init__(self, message: str, retry_after: float = 1.0):
        super().__init__(message)
        self.retry_after = retry_after


class GenerationTimeout(ServiceError):
    status = 504
    openai_code = "timeout"
    anthropic_type = "timeout_error"

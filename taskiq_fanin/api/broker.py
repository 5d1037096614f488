"""From the user's broker (or middleware) to the context the engines work with."""

from taskiq import AsyncBroker

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.exceptions import MiddlewareNotFoundError
from taskiq_fanin.worker.middleware import FanInMiddleware

#: What the public verbs accept: a broker with a ``FanInMiddleware``, or the
#: middleware itself.
Target = AsyncBroker | FanInMiddleware


def find_fanin(broker: object) -> FanInMiddleware:
    """The broker's ``FanInMiddleware``, with a clear error when there is none."""
    if isinstance(broker, FanInMiddleware):
        return broker
    for middleware in getattr(broker, "middlewares", ()):
        if isinstance(middleware, FanInMiddleware):
            return middleware
    raise MiddlewareNotFoundError(
        reason="the broker has no FanInMiddleware: "
        "broker.with_middlewares(FanInMiddleware(...))"
    )


def context_of(target: Target) -> FanInContext:
    """The started context of ``target``'s middleware (a clear error if none)."""
    return find_fanin(target).context

"""Checks of a chain before anything is written: steps, tasks, arguments, sizes.

Every chain is checked by :func:`validate_chain`: on its own, as a group's
member (the group engine asks through the context's ``check_chain`` port), as a
compensation. A step that is a group is checked as the group engine checks one.
"""

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.exceptions import InvalidChainError, NestingTooDeepError
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec, GroupSpec
from taskiq_fanin.groups.group_validation import (
    PREVIOUS,
    check_group,
    check_task,
    serialized,
)


def validate_chain(
    ctx: FanInContext,
    spec: ChainSpec,
    *,
    depth: int,
    after_previous: bool = False,
    checked: bool = False,
    within: str = "",
) -> None:
    """Check a chain before anything is written: steps, tasks, arguments, sizes.

    Every step, its compensation and ``on_error`` fit ``max_member_bytes``, and
    so does the plan as a whole: it travels in every message's chain label.
    ``after_previous``: the chain is a member of a group step that comes after
    a previous step, so its first step receives that result. ``checked``: the
    library starts it from a plan checked when its own chain or group started
    (compensations, a group's chain member): its arguments are not bound or
    measured again, so that an undo still runs after its task changed.
    ``within``: where the chain sits, for the errors (`` in member 3``).
    """
    if depth > ctx.config.max_depth:
        raise NestingTooDeepError(depth=depth, maximum=ctx.config.max_depth)
    if not spec.steps:
        raise InvalidChainError(reason="a chain needs at least one step")
    limit = None if checked else ctx.config.max_member_bytes
    for index, step in enumerate(spec.steps):
        if isinstance(step, GroupSpec):
            _check_group_step(
                ctx, step, index, depth=depth, checked=checked, within=within
            )
            continue
        what = f"step {index + 1} of the chain{within}"
        receives = (index > 0 or after_previous) and step.pass_result
        check_task(ctx, what, step, PREVIOUS if receives else None, bind=not checked)
        if step.compensation is not None:
            undo = f"the compensation of step {index + 1}{within}"
            check_task(ctx, undo, step.compensation, None, bind=not checked)
            serialized(undo, step.compensation, limit)
        serialized(what, step, limit)
    if spec.on_error is not None:
        what = f"the chain's on_error{within}"
        check_task(ctx, what, spec.on_error, "a ChainFailure", bind=not checked)
        serialized(what, spec.on_error, limit)
    serialized(f"the chain's plan{within}", spec, limit)


def _check_group_step(
    ctx: FanInContext,
    step: GroupSpec,
    index: int,
    *,
    depth: int,
    checked: bool,
    within: str,
) -> None:
    """A group as step ``index``: no options of its own; members fit the ledger.

    Its members receive the previous step's result, unless it is the first step
    (a chain member's first step that is a group receives none either).
    """
    set_here = (step.options.then, step.options.on_error, step.group_id)
    if any(value is not None for value in set_here):
        raise InvalidChainError(
            reason=f"step {index + 1}, a group inside a chain, takes no then, "
            "on_error or group_id: the next step is its continuation"
        )
    where = f" of step {index + 1}{within}"
    check_group(
        ctx,
        step,
        depth=depth + 1,
        after_previous=index > 0,
        bind=not checked,
        within=where,
    )
    # Before a previous result joins: the kick checks the members again with it.
    limit = ctx.config.max_member_bytes
    for number, member in enumerate(step.members):
        serialized(f"member {number}{where}", member, limit)


def validate_kick(what: str, step: Signature) -> None:
    """Check that a task step, with the arguments it is about to get, serializes."""
    serialized(what, step, None)

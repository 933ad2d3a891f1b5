"""The functions that may run as jobs, registered at import time and found by name.

A name is looked up here without importing anything; only what the project's own code
registered runs, and over HTTP only what ``@job(expose=True)`` registered
(:func:`exposed_job`). docs/concepts.md ("Registered jobs") tells why, and how jobs get
registered.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from functools import cached_property
from importlib import import_module
from typing import Any, TypeVar, cast

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.exceptions import UnknownJob

# The django.tasks backend, as a TASKS entry names it.
BACKEND_PATH = "django_ratequeue.backends.RateQueueBackend"


@dataclass(frozen=True)
class ExposedHooks:
    """Keep the callables ``@job(expose=True, ...)`` was given, uninterpreted.

    The HTTP API (:mod:`..api.exposure`) decides what they are called with and what they
    mean."""

    permission: Callable[..., bool] | None = None
    http_options: Callable[..., Mapping[str, Any]] | None = None


def exposed_hooks(
    expose: Any,
    permission: Callable[..., bool] | None,
    http_options: Callable[..., Mapping[str, Any]] | None,
) -> ExposedHooks | None:
    """Return what ``@job``'s ``expose=`` arguments ask for, ``None`` when not exposed.

    Raise ValueError for arguments that make no sense together."""
    if not isinstance(expose, bool):
        raise ValueError(f"expose must be True or False, not {expose!r}.")
    for name, hook in (("permission", permission), ("http_options", http_options)):
        if hook is not None and not callable(hook):
            raise ValueError(f"{name} must be a callable, not {hook!r}.")
        if hook is not None and not expose:
            raise ValueError(f"{name} is for jobs the HTTP API may enqueue: add expose=True.")
    return ExposedHooks(permission, http_options) if expose else None


# The call shapes whose answer one function keeps (see Parameters.problem).
SHAPES_KEPT = 1000


class Parameters:
    """Read a job function's parameters once, and tell which calls fit them."""

    def __init__(self, func: Callable[..., Any]) -> None:
        try:
            self.signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):  # nothing to check against (a builtin...)
            self.signature = None
        names = () if self.signature is None else self.signature.parameters
        self.names = frozenset(names)
        # Any keyword is taken when the function has a **kwargs parameter.
        self.any_keyword = self.signature is not None and any(
            p.kind == p.VAR_KEYWORD for p in self.signature.parameters.values()
        )
        self.shown = "(...)" if self.signature is None else bare(self.signature)
        self._answers: dict[tuple[Any, ...], str | None] = {}

    def problem(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """Say why calling the function with ``args`` and ``kwargs`` would raise ``TypeError``.

        Say it in Python's words; return ``None`` when they fit.

        Whether a call fits depends only on its number of positional arguments and the
        names of its keywords: the answer is kept per such shape, for shapes that name
        only the function's parameters (a caller's made-up names are not kept)."""
        if self.signature is None:
            return None
        shape = (len(args), *kwargs)
        try:
            return self._answers[shape]
        except KeyError:  # not asked yet (or forgotten, even by another thread meanwhile)
            pass
        answer = self._check(self.signature, args, kwargs)
        if self.names.issuperset(kwargs):
            if len(self._answers) >= SHAPES_KEPT:
                self._answers.clear()
            self._answers[shape] = answer
        return answer

    def _check(
        self, signature: inspect.Signature, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> str | None:
        """Work out :meth:`problem`'s answer.

        A keyword the function does not have is named first, as Python names it first in
        a call (``bind`` would name a missing argument first, which a misspelt keyword
        leaves missing)."""
        unknown = [] if self.any_keyword else [k for k in kwargs if k not in self.names]
        if unknown:
            name = unknown[0]
            short = isinstance(name, str) and len(name) <= 100  # a hostile one is not compared
            close = get_close_matches(name, self.names, n=1) if short else []
            maybe = f" (did you mean {close[0]!r}?)" if close else ""
            return f"got an unexpected keyword argument {_shown(name)}{maybe}"
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:
            return str(error)
        return None


def bare(signature: inspect.Signature) -> str:
    """Return ``signature`` as an error message shows it: names and defaults, no annotations."""
    plain = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=plain, return_annotation=signature.empty))


class Registered:
    """A function registered under its dotted path: the base of ``@job`` functions.

    ``intake.functions.JobFunction`` adds its options and ``enqueue``. Only those with
    :class:`ExposedHooks` can be enqueued over HTTP."""

    def __init__(self, func: Callable[..., Any], exposed: ExposedHooks | None = None) -> None:
        self.func = func
        self.path = job_path(func)
        self.exposed = exposed

    @cached_property
    def parameters(self) -> Parameters:
        """The function's parameters, read once.

        Enqueue checks calls against the registered job, which lives as long as the
        process."""
        return Parameters(self.func)


J = TypeVar("J", bound=Registered)

# dotted path -> the registered job, or (for tasks) the django.tasks Task
_jobs: dict[str, Registered] = {}
_tasks: dict[str, Any] = {}
# The paths of the registered jobs, sorted, kept until a registration changes them.
_known: tuple[str, ...] | None = None

FIX = (
    "decorate it with @job and make sure its module is imported at start-up "
    "(an installed app's jobs.py or tasks.py, or RATEQUEUE['JOB_MODULES'])"
)
TASK_FIX = (
    "define it with @task for a ratequeue backend, in an installed app's tasks.py or a "
    "module in RATEQUEUE['JOB_MODULES']"
)


def is_async(func: Callable[..., Any]) -> bool:
    """Return whether ``func`` is an ``async def`` function.

    Also behind ``functools.partial`` or ``functools.wraps``."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(inspect.unwrap(func))


def job_path(func: Callable[..., Any], what: str = "job function") -> str:
    """Return the dotted path of a module-level function: the name a worker finds it by."""
    module = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", None)
    if not callable(func) or not isinstance(module, str) or not isinstance(qualname, str):
        raise ValueError(f"The {what} must be a function or a dotted path, not {func!r}.")
    if "<" in qualname or "." in qualname:
        raise ValueError(
            f"The {what} {qualname!r} is not a module-level function; define it at the top "
            "level of a module so that workers can find it."
        )
    return f"{module}.{qualname}"


def register_job(job: J) -> J:
    """Register ``job`` under its path and return the registered job.

    A path names one job: decorating the same function again keeps the first
    registration (and its options); another function at that path (a reloaded module)
    replaces it."""
    global _known
    known = _jobs.get(job.path)
    if known is not None and known.func is job.func:
        return cast("J", known)  # the same function, so the same type
    _jobs[job.path] = job
    _known = None
    return job


def known_paths() -> tuple[str, ...]:
    """Return the dotted paths of the jobs registered in this process, sorted.

    What its runner claims, and what its heartbeat says it knows (:mod:`.heartbeat`).
    The same tuple until a registration changes it."""
    global _known
    known = _known
    if known is None:
        known = _known = tuple(sorted(_jobs))
    return known


def unknown_job_error(path: str, patience: float) -> str:
    """Return why a job whose function no running worker knew for ``patience`` seconds fails."""
    return (
        f"Unknown job function {_shown(path)}: no running worker knew it for {patience:g} "
        f"seconds (RATEQUEUE['UNKNOWN_JOB_PATIENCE']); only registered jobs run; {FIX}."
    )


def registered_job(func: Callable[..., Any] | str, what: str = "job function") -> Registered:
    """Return the registered job that ``func`` names; never import anything.

    ``func`` is the ``@job`` function, the plain function it decorates, or their dotted
    path. Raise :class:`UnknownJob` naming the fix for any other."""
    path = func if isinstance(func, str) else job_path(func, what)
    known = _jobs.get(path)
    if known is None or not (isinstance(func, str) or func is known.func or func is known):
        raise UnknownJob(f"Unknown {what} {_shown(path)}: only registered jobs run; {FIX}.")
    return known


def exposed_job(path: str) -> Registered:
    """Return the registered job at ``path`` that the HTTP API may enqueue.

    Raise :class:`UnknownJob` for any other name, registered or not; nothing is
    imported."""
    known = _jobs.get(path) if isinstance(path, str) else None
    if known is None or known.exposed is None:
        raise UnknownJob(f"No job {_shown(path)} can be enqueued over HTTP.")
    return known


def function_path(func: Callable[..., Any] | str, what: str = "job function") -> str:
    """Return the dotted path of the registered job that ``func`` names.

    ``func`` is a function, a ``@job`` copy, or its path; raise :class:`UnknownJob`
    otherwise. Nothing is imported."""
    if isinstance(func, Registered):
        func = func.func
    return registered_job(func, what).path


def check_call(
    job: Registered, args: Sequence[Any], kwargs: Mapping[str, Any], where: str = ""
) -> None:
    """Raise ``TypeError`` when ``args`` and ``kwargs`` do not fit ``job``'s function.

    A call that would fail on every attempt is refused at enqueue."""
    known = job.parameters
    problem = known.problem(args, kwargs)
    if problem is not None:
        raise TypeError(f"The arguments{where} do not fit {job.path}{known.shown}: {problem}.")


def register_task(task: Any) -> None:
    """Register a ``django.tasks`` Task defined for a ratequeue backend while the project starts.

    See :func:`register_job` for a path that is registered already. Refuse, with
    :class:`UnknownJob`, a task first defined after start-up (its module imported by a
    view, say): workers import only what every process imports at start-up, so they
    would fail it."""
    known = _tasks.get(task.module_path)
    if known is not None and known.func is task.func:
        return
    if apps.ready:
        raise UnknownJob(
            f"Task {_shown(task.module_path)} is defined after start-up, where workers "
            f"would not find it: only registered tasks run; {TASK_FIX}."
        )
    _tasks[task.module_path] = task


def registered_task(path: str) -> Any:
    """Return the Task registered at ``path``, or raise :class:`UnknownJob`; import nothing."""
    try:
        return _tasks[path]
    except (KeyError, TypeError):
        message = f"Unknown task {_shown(path)}: only registered tasks run; {TASK_FIX}."
        raise UnknownJob(message) from None


def _shown(name: Any) -> str:
    """Return a name as an error message quotes it: a hostile 10 MB one is cut short."""
    text = repr(name)
    return text if len(text) <= 300 else f"{text[:300]}..."


def autodiscover() -> None:
    """Import the modules that register jobs, in every process (the app's ``ready()``).

    As the admin finds ``admin.py``: each installed app's ``jobs`` and ``tasks`` modules
    (where Celery and django.tasks users put theirs), and the modules
    ``RATEQUEUE["JOB_MODULES"]`` names."""
    autodiscover_modules("jobs", "tasks")
    try:
        modules = ratequeue_settings().JOB_MODULES
    except ImproperlyConfigured:
        return  # the system checks say what is wrong; nothing runs on invalid settings
    for name in modules:
        try:
            import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (name == exc.name or name.startswith(f"{exc.name}.")):
                raise  # a module that is there but imports something missing
            raise ImproperlyConfigured(
                f"RATEQUEUE['JOB_MODULES'] names {name!r}, which does not exist."
            ) from exc

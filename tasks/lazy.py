"""Prefect's ``task`` and ``flow`` decorators, made lazy: Prefect is imported when it runs something.

A stage of a plain ``dvc repro`` runs without Prefect (:mod:`flows.invocation`): its flow's function
is called directly and every task it calls is its plain function, so such a process never imports
Prefect nor starts its temporary server.

* :func:`task` returns a :class:`LazyTask`: in a Prefect flow or task run it is the Prefect task (a
  call, ``map``, ``submit``: task runs); outside one, calling it calls the function.
* :func:`flow` returns a :class:`LazyFlow`: always the Prefect flow (a call is a flow run).

Either's Prefect object is made on first use (:attr:`LazyTask.prefect_task`, :attr:`LazyFlow.prefect_flow`);
``fn`` is the function, as on Prefect's own objects.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from typing import Any, Callable


def in_prefect_run() -> bool:
    """Whether this runs inside a Prefect flow or task run (never before Prefect is imported)."""
    if "prefect" not in sys.modules:
        return False
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def _attribute(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name)


class Deferred:
    """An option value from Prefect (``module.name``), looked up when the Prefect object is made."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def resolve(self) -> Any:
        return _attribute(self.module, self.name)


#: ``prefect.cache_policies.NO_CACHE``, for ``@task(cache_policy=NO_CACHE)``.
NO_CACHE = Deferred("prefect.cache_policies", "NO_CACHE")


class _Lazy:
    """A Prefect object made from ``fn`` and ``options`` on first use; other attributes are its."""

    _make: str  # "task" or "flow": the prefect decorator

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]):
        self.fn = fn
        self.options = options
        self._made: Any = None
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def _prefect(self) -> Any:
        if self._made is None:
            with self._lock:
                if self._made is None:
                    options = {k: v.resolve() if isinstance(v, Deferred) else v for k, v in self.options.items()}
                    self._made = getattr(importlib.import_module("prefect"), self._make)(self.fn, **options)
        return self._made

    @property
    def name(self) -> str:
        return self.options.get("name") or self.fn.__name__

    def with_options(self, **options: Any) -> Any:
        """Prefect's ``with_options``: a Prefect object with these options changed."""
        return self._prefect().with_options(**options)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._prefect(), name)

    def __reduce__(self):  # pickled by name (a Dask worker imports the module and finds the same object)
        return _attribute, (self.fn.__module__, self.fn.__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class LazyTask(_Lazy):
    _make = "task"

    @property
    def prefect_task(self) -> Any:
        """The Prefect task (``prefect.Task``)."""
        return self._prefect()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if in_prefect_run():
            return self._prefect()(*args, **kwargs)
        return self.fn(*args, **kwargs)

    def map(self, *args: Any, **kwargs: Any) -> Any:
        return self._prefect().map(*args, **kwargs)

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        return self._prefect().submit(*args, **kwargs)


class LazyFlow(_Lazy):
    _make = "flow"

    @property
    def prefect_flow(self) -> Any:
        """The Prefect flow (``prefect.Flow``)."""
        return self._prefect()

    @property
    def flow_run_name(self) -> Any:
        return self.options.get("flow_run_name")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._prefect()(*args, **kwargs)


def task(fn: Callable[..., Any] | None = None, **options: Any):
    """``prefect.task``, lazily (:class:`LazyTask`); as ``@task`` or ``@task(name=..., ...)``."""
    if fn is None:
        return lambda f: LazyTask(f, options)
    return LazyTask(fn, options)


def flow(fn: Callable[..., Any] | None = None, **options: Any):
    """``prefect.flow``, lazily (:class:`LazyFlow`); as ``@flow`` or ``@flow(name=..., ...)``."""
    if fn is None:
        return lambda f: LazyFlow(f, options)
    return LazyFlow(fn, options)

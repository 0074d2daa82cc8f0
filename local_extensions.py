"""The template's Jinja extensions: a sandbox for the answers, and the answers' review.

Keep their interface fixed: cruft update renders the old and the new template in one process, and
Python keeps the first local_extensions it imported, so a change here reaches a project only on its
next bake from scratch. The rules themselves live in hooks/answers.py and the machinery, loaded
fresh from the template folder on every call.

SandboxExtension:

With --no-input, extra context or a replay file, cookiecutter renders every answer as a Jinja
template before the hooks can look at it, in an unsandboxed environment: an answer such as
{{ cycler.__init__.__globals__.os.system("...") }} would run a shell command. Listed in
cookiecutter.json's _extensions, this extension turns each environment it is loaded into into
Jinja's sandboxed environment, so that attributes starting with "_" and unsafe calls raise
SecurityError and generation stops instead. Arithmetic such as {{ 7 * 7 }} still renders (49):
harmless, and Jinja has no switch to leave answers unrendered.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import sys
from pathlib import Path
from typing import Any

from jinja2 import Environment, Undefined
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment, safe_range


class UnsafeTemplateError(UndefinedError, SecurityError):
    """Unsafe access in a template. An UndefinedError, so that cookiecutter reports it in one
    message naming the variable ("Unable to render variable ...") instead of a traceback."""


def _unsafe_undefined(self: SandboxedEnvironment, obj: Any, attribute: str) -> Undefined:
    return self.undefined(
        f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe: answers are"
        " text, and Jinja in them may not reach Python internals",
        name=attribute,
        obj=obj,
        exc=UnsafeTemplateError,
    )


class SandboxExtension(Extension):
    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        if isinstance(environment, SandboxedEnvironment):
            return
        # Jinja loads extensions inside Environment.__init__, after its globals exist and before
        # any template is compiled, so every template of this environment compiles sandboxed.
        base = type(environment)
        sandboxed = type(
            f"Sandboxed{base.__name__}", (SandboxedEnvironment, base), {"unsafe_undefined": _unsafe_undefined}
        )
        environment.__class__ = sandboxed
        environment.globals["range"] = safe_range
        environment.binop_table = SandboxedEnvironment.default_binop_table.copy()
        environment.unop_table = SandboxedEnvironment.default_unop_table.copy()


class AnswersExtension(Extension):
    """Gives the template `review(cookiecutter)`: every answer checked (hooks/answers.py), and the
    sizing decision that settings.yaml and the hooks print. Also keeps cookiecutter from printing a
    traceback after a hook's refusal: the hook's own lines above it are the message."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        environment.globals["review"] = review
        hooks_logger = logging.getLogger("cookiecutter.hooks")
        if not any(isinstance(existing, _NoTracebackOnRefusal) for existing in hooks_logger.filters):
            hooks_logger.addFilter(_NoTracebackOnRefusal())


def review(answers: Any) -> dict[str, Any]:
    root = template_root()
    name = f"_template_answers_{next(_LOADS)}"
    spec = importlib.util.spec_from_file_location(name, root / "hooks" / "answers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and annotations look their module up while it loads
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module.review(dict(answers), str(root))


_LOADS = itertools.count()


def template_root() -> Path:
    """The template being rendered. Cookiecutter (and cruft through it) renders the hooks from the
    template's root folder, where it finds them, and the files from the project folder inside it."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "cookiecutter.json").is_file() and (folder / "hooks" / "answers.py").is_file():
            return folder
    raise RuntimeError(f"review() is called outside the template's folder (from {here})")


class _NoTracebackOnRefusal(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Stopping generation because"):
            record.exc_info, record.exc_text = None, None
        return True

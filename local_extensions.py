"""A Jinja sandbox for cookiecutter's own rendering of the answers and the template.

With --no-input, extra context or a replay file, cookiecutter renders every answer as a Jinja
template before the hooks can look at it, in an unsandboxed environment: an answer such as
{{ cycler.__init__.__globals__.os.system("...") }} would run a shell command. Listed in
cookiecutter.json's _extensions, this extension turns each environment it is loaded into into
Jinja's sandboxed environment, so that attributes starting with "_" and unsafe calls raise
SecurityError and generation stops instead. Arithmetic such as {{ 7 * 7 }} still renders (49):
harmless, and Jinja has no switch to leave answers unrendered.
"""

from __future__ import annotations

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

"""The Python modules the query's stateful operators import in Spark's Python workers, checked before the start.

transformWithStateInPandas and applyInPandasWithState run the user's code in Python workers that
import pandas and Arrow (and, for transformWithState, protobuf to talk to the state server). Missing
one, the first batch dies with "driver worker exited unexpectedly (crashed)", the ImportError only in
logs/spark.log. The workers run this interpreter (session.py sets it), so importing here finds the same.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from ...core.operators import OPERATORS
from ...core.plan_operators import PlanOperator
from ..endpoints.delta import MissingPackageError

# What pip installs a module under, where the names differ.
PIP_NAMES = {"google.protobuf": "protobuf"}


def require_operator_modules(plan: Sequence[PlanOperator]) -> None:
    """MissingPackageError naming the first module an operator of the plan needs and this Python lacks."""
    for operator in plan:
        for module in OPERATORS[operator.kind].python_modules if operator.known else ():
            try:
                importlib.import_module(module)
            except ImportError as error:
                package = PIP_NAMES.get(module, module)
                raise MissingPackageError(
                    f"the query's {operator.kind} (Spark's {operator.spark_name}) runs Python that imports {module},"
                    f" which {sys.executable} cannot import ({error}); pip install {package} there (and list it in"
                    " pyproject.toml's dependencies); nothing was started"
                ) from None

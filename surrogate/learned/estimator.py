"""scikit-learn's estimator conventions, for the learned model: its settings are its
constructor's keyword arguments, read by :meth:`Estimator.get_params`, changed by
:meth:`Estimator.set_params` (taking effect at the next ``fit``) and shown by its ``repr``
where they differ from the defaults, so that scikit-learn's tools (``clone``, grid searches)
handle it; and the error of an estimator not fitted (:func:`not_fitted_error`)."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Self

from surrogate.errors import NoModelError


class Estimator:
    """Settings by name, as scikit-learn's ``BaseEstimator`` gives them."""

    @classmethod
    def _param_names(cls) -> list[str]:
        return [
            p.name
            for p in inspect.signature(cls.__init__).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's settings, by name (``deep`` is accepted for scikit-learn: no
        setting is itself an estimator)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Self:
        """Change settings by name; they take effect at the next ``fit``."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(
                    f"{type(self).__name__} has no setting {name!r}; its settings "
                    f"are {', '.join(valid)}"
                )
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {
            p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()
        }
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if v != defaults[k]]
        return f"{type(self).__name__}({', '.join(changed)})"


@functools.cache
def not_fitted_error() -> type[NoModelError]:
    """:class:`NotFittedError`, made on first use.

    It is both the project's :class:`~surrogate.errors.NoModelError` (the CLI prints it as one
    line) and scikit-learn's ``NotFittedError`` (what scikit-learn's tools and their users
    catch). Made when first raised or imported rather than at import: importing scikit-learn
    takes about 2 s."""
    from sklearn.exceptions import NotFittedError as SklearnNotFittedError

    return type(
        "NotFittedError",
        (NoModelError, SklearnNotFittedError),
        {
            "__module__": "surrogate.learned.model",  # where it is found (its __getattr__)
            "__doc__": "A SurrogateModel that is not fitted was asked to predict, explain or save.",
        },
    )

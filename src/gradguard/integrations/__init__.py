"""gradguard inside the frameworks people train with.

Each submodule imports its framework at the top (through :func:`require`, which
names the extra to install when it is missing) and is itself imported only
when the user asks for it, so ``import gradguard`` never pulls in Lightning,
Accelerate or Transformers:

* :mod:`gradguard.integrations.lightning`: ``ExactAccumulation`` (a Lightning
  callback that makes ``Trainer(accumulate_grad_batches=K)`` exact) and
  ``Watch`` (the run-time watch over ``fit``).
* :mod:`gradguard.integrations.transformers`: ``exact`` (makes an HF
  ``Trainer``'s accumulated gradient the full-batch token mean, for any
  model), ``check_trainer`` (is it the full-batch one?) and ``Watch`` (a
  ``TrainerCallback``).
* :mod:`gradguard.integrations.pytest_plugin`: ``pytest --gradguard``, the
  watch around every test (pytest finds it through its ``pytest11`` entry point).

The drivers behind ``gradguard.Accumulator(..., accelerator=acc)`` sit below
the Accumulator, beside the process-group drivers: :mod:`gradguard.accelerators`.
"""


def require(module: str, extra: str) -> None:
    """Import ``module``, or raise an ImportError that says what installs it: the requirements of gradguard's
    extra ``extra`` (gradguard is not on a package index, so ``gradguard[extra]`` would not resolve there).

    >>> require("no_such_framework_here", "lightning")
    Traceback (most recent call last):
    ...
    ModuleNotFoundError: this gradguard integration needs no_such_framework_here, which is not installed: pip install "torch>=2.1" "lightning>=2.2"
    """
    import importlib

    from .._extras import install_hint

    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or module.split(".")[0] != exc.name.split(".")[0]:
            raise  # something inside the framework is missing: its own message says what
        raise ModuleNotFoundError(
            f"this gradguard integration needs {module}, which is not installed: {install_hint(extra)}",
            name=exc.name,
        ) from None

"""gradguard inside the frameworks people train with.

Each submodule imports its framework at the top and is itself imported only
when the user asks for it, so ``import gradguard`` never pulls in Lightning,
Accelerate or Transformers:

* :mod:`gradguard.integrations.lightning`: ``ExactAccumulation`` (a Lightning
  callback that makes ``Trainer(accumulate_grad_batches=K)`` exact) and
  ``Watch`` (the run-time watch over ``fit``).
* :mod:`gradguard.integrations.transformers`: ``exact`` (makes an HF
  ``Trainer``'s accumulated gradient the full-batch token mean, for any
  model), ``check_trainer`` (is it the full-batch one?) and ``Watch`` (a
  ``TrainerCallback``).

The drivers behind ``gradguard.Accumulator(..., accelerator=acc)`` sit below
the Accumulator, beside the process-group drivers: :mod:`gradguard.accelerators`.
"""

"""Correct: the training loops of well-known recipes (no finding expected).

torchtune's full-finetune recipe (loss times token count, detached running loss,
all-reduced token count, scale_grads, step every grad_accum micro-batches), HF
transformers' run_clm_no_trainer (Accelerate), fairseq's trainer (zero_grad at the
top of each update, delayed-update inner loop) and timm's train_one_epoch (a
NativeScaler called as loss_scaler(loss, optimizer, ...)).
"""
import contextlib
import math
import time

import torch
import torch.distributed as dist


class FullFinetuneRecipeDistributed:  # torchtune/recipes/full_finetune_distributed.py
    def train(self) -> None:
        self._optimizer.zero_grad()
        running_loss = 0
        num_tokens = 0
        t0 = time.perf_counter()
        for curr_epoch in range(self.epochs_run, self.total_epochs):
            self._sampler.set_epoch(curr_epoch)
            for idx, batch in enumerate(self._dataloader):
                if self.max_steps_per_epoch is not None and (idx // self._gradient_accumulation_steps) == self.max_steps_per_epoch:
                    break
                batch = {k: v.to(self._device) for k, v in batch.items()}
                current_num_tokens = (batch["labels"] != self._loss_fn.ignore_index).sum()
                num_tokens += current_num_tokens
                labels = batch.pop("labels")
                logits = self._model(**batch)
                labels = torch.hstack((labels[..., 1:], self.ignore_labels_cache[: labels.shape[0]]))
                current_loss = self._loss_fn(logits, labels) * current_num_tokens
                del logits
                running_loss += current_loss.detach()
                current_loss.backward()
                if ((idx + 1) % self._gradient_accumulation_steps) == 0:
                    dist.all_reduce(num_tokens)
                    dist.all_reduce(running_loss)
                    scale_grads(self._model, self.dp_degree / num_tokens)
                    if self._clip_grad_norm is not None:
                        grad_norm = torch.nn.utils.clip_grad_norm_(self._model.parameters(), max_norm=float(self._clip_grad_norm))
                    self._optimizer.step()
                    self._optimizer.zero_grad(set_to_none=True)
                    self._lr_scheduler.step()
                    self.global_step += 1
                    loss_to_log = running_loss.item() / num_tokens
                    self._metric_logger.log_dict({"loss": loss_to_log, "tokens_per_second": num_tokens / (time.perf_counter() - t0)}, step=self.global_step)
                    running_loss = 0
                    num_tokens = 0
                    t0 = time.perf_counter()
            self.epochs_run += 1


def scale_grads(model, scaler):
    for p in model.parameters():
        if p.grad is not None:
            p.grad *= scaler


def torchtune_single_device(model, dataloader, loss_fn, optimizer, gradient_accumulation_steps):
    running_loss = 0
    num_tokens = 0
    optimizer.zero_grad()
    for idx, batch in enumerate(dataloader):
        labels = batch["labels"]
        current_num_tokens = (labels != -100).sum()
        num_tokens += current_num_tokens
        loss = loss_fn(model(batch["tokens"]), labels) * current_num_tokens
        running_loss += loss.detach()
        loss.backward()
        if ((idx + 1) % gradient_accumulation_steps) == 0:
            scale_grads(model, 1 / num_tokens)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            running_loss = 0
            num_tokens = 0
    if num_tokens:
        optimizer.step()


def run_clm_no_trainer(args, model, optimizer, lr_scheduler, accelerator, train_dataloader, eval_dataloader, progress_bar):
    # transformers/examples/pytorch/language-modeling/run_clm_no_trainer.py
    completed_steps = 0
    for epoch in range(args.num_train_epochs):
        model.train()
        if args.with_tracking:
            total_loss = 0
        for step, batch in enumerate(train_dataloader):
            with accelerator.accumulate(model):
                outputs = model(**batch)
                loss = outputs.loss
                # We keep track of the loss at each epoch
                if args.with_tracking:
                    total_loss += loss.detach().float()
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                progress_bar.update(1)
                completed_steps += 1
            if completed_steps >= args.max_train_steps:
                break
        model.eval()
        losses = []
        for step, batch in enumerate(eval_dataloader):
            with torch.no_grad():
                outputs = model(**batch)
            loss = outputs.loss
            losses.append(accelerator.gather_for_metrics(loss.repeat(args.per_device_eval_batch_size)))
        losses = torch.cat(losses)
        try:
            eval_loss = torch.mean(losses)
            perplexity = math.exp(eval_loss)
        except OverflowError:
            perplexity = float("inf")
        print(perplexity)


class FairseqTrainer:  # fairseq/trainer.py, simplified
    def zero_grad(self):
        self.optimizer.zero_grad()

    def train_step(self, samples, raise_oom=False):
        self.model.train()
        self.zero_grad()
        logging_outputs, sample_size, ooms = [], 0, 0
        for i, sample in enumerate(samples):  # delayed update loop

            def maybe_no_sync():
                if self.data_parallel_world_size > 1 and i < len(samples) - 1:
                    return self.model.no_sync()
                return contextlib.ExitStack()

            try:
                with maybe_no_sync():
                    loss, sample_size_i, logging_output = self.criterion(self.model, sample)
                    self.optimizer.backward(loss)
                    del loss
                logging_outputs.append(logging_output)
                sample_size += sample_size_i
            except RuntimeError as e:
                if "out of memory" in str(e):
                    ooms += 1
                    self.zero_grad()
                else:
                    raise e
        self.optimizer.multiply_grads(self.data_parallel_world_size / (sample_size or 1.0))
        self.optimizer.step()
        return logging_outputs


def fairseq_train(cfg, trainer, epoch_itr):
    # fairseq_cli/train.py: one update per group of update_freq samples
    for i, samples in enumerate(epoch_itr):
        log_output = trainer.train_step(samples)
        if log_output is None:
            continue


def fairseq_plain(model, criterion, optimizer, epoch_itr, update_freq):
    for i, samples in enumerate(epoch_itr):
        optimizer.zero_grad()
        sample_size = 0
        for sample in samples:
            loss, sample_size_i, logging_output = criterion(model, sample)
            optimizer.backward(loss)
            sample_size += sample_size_i
        optimizer.multiply_grads(1.0 / float(sample_size))
        optimizer.step()


def timm_train_one_epoch(epoch, model, loader, optimizer, loss_fn, args, lr_scheduler=None, amp_autocast=contextlib.nullcontext,
                         loss_scaler=None, model_ema=None, losses_m=None):
    # timm/train.py: NativeScaler.__call__ does scale(loss).backward(), clipping and step()
    second_order = hasattr(optimizer, "is_second_order") and optimizer.is_second_order
    model.train()
    num_updates = epoch * len(loader)
    last_idx = len(loader) - 1
    for batch_idx, (input, target) in enumerate(loader):
        last_batch = batch_idx == last_idx
        with amp_autocast():
            output = model(input)
            loss = loss_fn(output, target)
        if not args.distributed:
            losses_m.update(loss.item(), input.size(0))
        optimizer.zero_grad()
        if loss_scaler is not None:
            loss_scaler(loss, optimizer, clip_grad=args.clip_grad, clip_mode=args.clip_mode,
                        parameters=model.parameters(), create_graph=second_order)
        else:
            loss.backward(create_graph=second_order)
            if args.clip_grad is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            optimizer.step()
        if model_ema is not None:
            model_ema.update(model)
        num_updates += 1
        if lr_scheduler is not None:
            lr_scheduler.step_update(num_updates=num_updates, metric=losses_m.avg)
        if last_batch:
            break


def timm_accumulating(model, loader, optimizer, loss_fn, loss_scaler, accum_steps):
    # timm >= 1.0: need_update decides the step of an accumulation window
    optimizer.zero_grad()
    last_accum_steps = len(loader) % accum_steps
    updates_per_epoch = (len(loader) + accum_steps - 1) // accum_steps
    last_batch_idx = len(loader) - 1
    last_batch_idx_to_accum = len(loader) - last_accum_steps
    for batch_idx, (input, target) in enumerate(loader):
        last_batch = batch_idx == last_batch_idx
        need_update = last_batch or (batch_idx + 1) % accum_steps == 0
        if batch_idx >= last_batch_idx_to_accum:
            accum_steps = last_accum_steps
        loss = loss_fn(model(input), target)
        if accum_steps > 1:
            loss /= accum_steps
        if loss_scaler is not None:
            loss_scaler(loss, optimizer, need_update=need_update)
        else:
            loss.backward()
            if need_update:
                optimizer.step()
        if not need_update:
            continue
        optimizer.zero_grad()


def torchtune_running_loss_reset_each_window(model, dataloader, loss_fn, optimizer, gradient_accumulation_steps):
    # torchtune's own form: the loss tensor itself is summed, but the total is reset at every
    # window's end, so the graphs it links never outlive one window (no growing leak).
    running_loss = 0
    num_tokens = 0
    for idx, batch in enumerate(dataloader):
        labels = batch["labels"]
        current_num_tokens = (labels != -100).sum()
        num_tokens += current_num_tokens
        current_loss = loss_fn(model(batch["tokens"]), labels) * current_num_tokens
        running_loss += current_loss
        current_loss.backward()
        if ((idx + 1) % gradient_accumulation_steps) == 0:
            scale_grads(model, 1 / num_tokens)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            print(running_loss.item() / num_tokens)
            running_loss = 0
            num_tokens = 0
    if num_tokens:
        optimizer.step()

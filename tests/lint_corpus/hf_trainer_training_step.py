"""An HF Trainer subclass overriding training_step to log an auxiliary term; the Trainer clears and steps."""
import torch
from transformers import Trainer, TrainingArguments


class AuxLossTrainer(Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        model.train()
        inputs = self._prepare_inputs(inputs)
        with self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)
        if self.args.n_gpu > 1:
            loss = loss.mean()
        self.accelerator.backward(loss)
        return loss.detach() / self.args.gradient_accumulation_steps


def finetune(model, train_dataset, eval_dataset, tokenizer):
    args = TrainingArguments(output_dir="out", gradient_accumulation_steps=4, learning_rate=2e-5, num_train_epochs=1)
    trainer = AuxLossTrainer(model=model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset)
    trainer.train()
    with torch.no_grad():
        metrics = trainer.evaluate()
    return metrics

"""ML2021 homework 7 (BERT question answering) sample code: `train_loss += output.loss` keeps each batch's graph until the next logging reset, and the CPU RAM grows until it runs out.

source: pai4451/ML2021#2 (https://github.com/pai4451/ML2021/issues/2), "HW7 Out of memory": "When i run the HW7 TA example code, my cpu ram keep increasing until out of my 64G ram ... train_loss += output.loss # store the complete compution graph leading to out of memory; train_loss += output.loss.detach() or .item() if i modify original code to this, problem solved."; the repository owner: "Tensor.detach() detached tensor from the current graph. This helps prevent memory leak."
family: graph-logging
shape: for epoch in range(num_epoch): step = 1; train_loss = train_acc = 0; for data in train_loader: output = model(input_ids=data[0], token_type_ids=data[1], attention_mask=data[2], start_positions=data[3], end_positions=data[4]); start_index = argmax(output.start_logits); end_index = argmax(output.end_logits); train_acc += ((start_index == data[3]) & (end_index == data[4])).float().mean(); train_loss += output.loss; output.loss.backward(); optimizer.step(); optimizer.zero_grad(); step += 1; if step % logging_step == 0: print(... train_loss.item() / logging_step ...); train_loss = train_acc = 0. logging_step = 100 as in the sample
numeric: with fewer batches than logging_step, train_loss reaches every batch's graph until the end of the run
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class QAOutput:
    def __init__(self, loss, start_logits, end_logits):
        self.loss, self.start_logits, self.end_logits = loss, start_logits, end_logits


class BertForQuestionAnswering(torch.nn.Module):
    def __init__(self, vocab=30, hidden=16):
        super().__init__()
        self.embeddings = torch.nn.Embedding(vocab, hidden)
        self.token_type = torch.nn.Embedding(2, hidden)
        self.encoder = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.GELU())
        self.qa_outputs = torch.nn.Linear(hidden, 2)

    def forward(self, input_ids, token_type_ids, attention_mask, start_positions, end_positions):
        h = self.encoder(self.embeddings(input_ids) + self.token_type(token_type_ids))
        start_logits, end_logits = self.qa_outputs(h).masked_fill(~attention_mask[..., None], -1e4).unbind(-1)
        loss = (F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions)) / 2
        return QAOutput(loss, start_logits, end_logits)


_gb.setup()
model = BertForQuestionAnswering()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
train_loader = []
for _ in range(12):
    ids = torch.randint(0, 30, (4, 12))
    train_loader.append((ids, (torch.arange(12) > 5).long().expand(4, 12), torch.ones(4, 12, dtype=torch.bool),
                         ids[:, :6].argmax(1) + 6, ids[:, 6:].argmax(1) + 6))
num_epoch, logging_step = 1, 100
model.train()
for epoch in range(num_epoch):
    step = 1
    train_loss = train_acc = 0
    for data in train_loader:
        output = model(input_ids=data[0], token_type_ids=data[1], attention_mask=data[2], start_positions=data[3],
                       end_positions=data[4])
        start_index = torch.argmax(output.start_logits, dim=1)
        end_index = torch.argmax(output.end_logits, dim=1)
        train_acc += ((start_index == data[3]) & (end_index == data[4])).float().mean()
        train_loss += output.loss  # BUG
        # FIX: train_loss += output.loss.detach()
        output.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step % logging_step == 0:
            print(f"Epoch {epoch + 1} | Step {step} | loss = {train_loss.item() / logging_step:.3f}")
            train_loss = train_acc = 0
_gb.done(model, kept=[train_loss])

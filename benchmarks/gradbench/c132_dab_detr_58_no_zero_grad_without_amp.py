"""DAB-DETR engine.py: train_one_epoch clears the gradients only in its AMP branch; the default (non-AMP) branch runs `losses.backward()`, the clip and `optimizer.step()` with no `optimizer.zero_grad()`, so every step applies the sum of all earlier batches' gradients.

source: IDEA-Research/DAB-DETR#58 (https://github.com/IDEA-Research/DAB-DETR/issues/58), "optimizer.zero_grad()": "It seems that optimizer.zero_grad() is forgotten to call here (engine.py#L82-L87)". The maintainer (SlongLiu): "Thanks for your good question. It can be viewed as a bug in our implementation, but with little influence on the final performance." Code read (engine.py, train_one_epoch): if args.amp: optimizer.zero_grad(); scaler.scale(losses).backward(); ...; scaler.step(optimizer); scaler.update() else: losses.backward(); if max_norm > 0: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); optimizer.step(). The detector is reduced to a small set-prediction head with a classification and an L1 box loss weighted by weight_dict; args.amp is False (the default, and AMP needs CUDA). The twin clears at the top of the non-AMP branch, as the AMP branch does
family: missing-clear
shape: losses = sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in weight_dict); if args.amp: (zero_grad, scaled backward, unscale, clip, scaler.step) else: losses.backward(); clip_grad_norm_(model.parameters(), max_norm=0.1); optimizer.step(). AdamW(lr=1e-4, weight_decay=1e-4), 6 batches
numeric: from the second step on, each step clips and applies the running sum of every earlier batch's gradient
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class Detector(torch.nn.Module):
    def __init__(self, num_queries=5, num_classes=4):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU())
        self.query_embed = torch.nn.Parameter(torch.randn(num_queries, 24) * 0.1)
        self.class_embed = torch.nn.Linear(24, num_classes + 1)
        self.bbox_embed = torch.nn.Linear(24, 4)

    def forward(self, samples):
        h = self.backbone(samples).unsqueeze(1) + self.query_embed
        return {"pred_logits": self.class_embed(h), "pred_boxes": self.bbox_embed(h).sigmoid()}


class SetCriterion(torch.nn.Module):
    weight_dict = {"loss_ce": 1.0, "loss_bbox": 5.0}

    def forward(self, outputs, targets):
        logits = outputs["pred_logits"]
        return {"loss_ce": F.cross_entropy(logits.flatten(0, 1), targets["labels"].flatten()),
                "loss_bbox": F.l1_loss(outputs["pred_boxes"], targets["boxes"])}


class Args:
    amp = False


def train_one_epoch(model, criterion, data_loader, optimizer, max_norm, args, scaler=None):
    model.train()
    criterion.train()
    for samples, targets in data_loader:
        outputs = model(samples)
        loss_dict = criterion(outputs, targets)
        weight_dict = criterion.weight_dict
        losses = sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in weight_dict)
        if args.amp:
            optimizer.zero_grad()
            scaler.scale(losses).backward()
            if max_norm > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            # FIX: optimizer.zero_grad()
            losses.backward()
            if max_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()


_gb.setup()
model = Detector()
criterion = SetCriterion()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
data_loader = [(torch.randn(2, 12), {"labels": torch.randint(0, 5, (2, 5)), "boxes": torch.rand(2, 5, 4)})
               for _ in range(6)]
train_one_epoch(model, criterion, data_loader, optimizer, 0.1, Args())
_gb.done(model)

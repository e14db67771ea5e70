"""DN-DETR engine.py: train_one_epoch's default (non-AMP) branch backpropagates the matching and denoising losses, clips and steps without `optimizer.zero_grad()`, so every step clips and applies the sum of all earlier batches' gradients.

source: IDEA-Research/DN-DETR#19 (https://github.com/IDEA-Research/DN-DETR/issues/19), "need zero_grad": "engine.py#L84-L88 (at 206fa26): It looks like you forgot optimizer.zero_grad()"; the reporter adds "new gradients are produced first, and then the clip comes, i.e. at each step you accumulate all gradients which were previously calculated." The issue is closed without a maintainer reply on record; the sibling DAB-DETR's maintainer acknowledged the same lines as a bug (DAB-DETR#58, case c132). The lines follow the DETR-family loop DAB-DETR's engine.py shows (the else-branch: losses.backward(); clip_grad_norm_(model.parameters(), max_norm); optimizer.step()), with DN-DETR's denoising part: the model gets the noised ground-truth boxes as extra queries (dn_args) and the criterion adds their reconstruction loss (mask_dict). The twin clears at the top of the branch
family: missing-clear
shape: outputs, mask_dict = model(samples, dn_args=(targets, scalar, label_noise_scale, box_noise_scale)); loss_dict = criterion(outputs, targets, mask_dict); losses = weighted sum; non-AMP branch as quoted; max_norm = 0.1, AdamW(lr=1e-4, weight_decay=1e-4), 6 batches
numeric: from the second step on, each step clips and applies the running sum of every earlier batch's gradient
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class DNDETR(torch.nn.Module):
    def __init__(self, num_queries=4):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU())
        self.query = torch.nn.Parameter(torch.randn(num_queries, 20) * 0.1)
        self.box_in = torch.nn.Linear(4, 20)
        self.bbox_embed = torch.nn.Linear(20, 4)

    def forward(self, samples, dn_args=None):
        h = self.backbone(samples).unsqueeze(1)
        out = {"pred_boxes": self.bbox_embed(h + self.query).sigmoid()}
        mask_dict = None
        if dn_args is not None:
            targets, scalar, label_noise_scale, box_noise_scale = dn_args
            noised = (targets["boxes"] + box_noise_scale * torch.randn_like(targets["boxes"])).clamp(0, 1)
            mask_dict = {"dn_boxes": self.bbox_embed(h + self.box_in(noised)).sigmoid()}
        return out, mask_dict


def criterion(outputs, targets, mask_dict):
    loss_dict = {"loss_bbox": F.l1_loss(outputs["pred_boxes"], targets["boxes"])}
    if mask_dict is not None:
        loss_dict["tgt_loss_bbox"] = F.l1_loss(mask_dict["dn_boxes"], targets["boxes"])
    return loss_dict


weight_dict = {"loss_bbox": 5.0, "tgt_loss_bbox": 5.0}


class Args:
    amp = False
    scalar, label_noise_scale, box_noise_scale = 5, 0.2, 0.4


def train_one_epoch(model, data_loader, optimizer, max_norm, args):
    model.train()
    for samples, targets in data_loader:
        outputs, mask_dict = model(samples, dn_args=(targets, args.scalar, args.label_noise_scale, args.box_noise_scale))
        loss_dict = criterion(outputs, targets, mask_dict)
        losses = sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in weight_dict)
        if args.amp:
            raise NotImplementedError("AMP needs CUDA")
        else:
            # FIX: optimizer.zero_grad()
            losses.backward()
            if max_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()


_gb.setup()
model = DNDETR()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4)
data_loader = [(torch.randn(2, 10), {"boxes": torch.rand(2, 4, 4)}) for _ in range(6)]
train_one_epoch(model, data_loader, optimizer, 0.1, Args())
_gb.done(model)

"""3DVNet: the pretrained MnasNet backbone is "frozen" with `.eval()` only, while its parameters stay in the optimizer, so every step trains it.

source: alexrich021/3dvnet#11 (https://github.com/alexrich021/3dvnet/issues/11), "Frozen Backbone Implementation": "All I can found about the 'frozen implementation on MnasNet backbone' is as below (mv3d/lightningmodel.py#L272) ... .eval() only fixes the running statistics in batchnorm and dropout, but does not disable the gradient computations ... the backbone weights are still updating for each time training_step() is called." The author (alexrich021): "Great catch, the proper method is to change 3dvnet/mv3d/lightningmodel.py line 286 to {'params': self.mvsnet.feat_shrinker.parameters()}, during training to freeze the weights of the MnasNet backbone and to use {'params': self.mvsnet.parameters()} during finetuning". The MVS network is reduced to a backbone with batch norm, a feature shrinker and a depth head; the twin builds the optimizer group from the shrinker, as the author says The twin applies the author's fix and also freezes the backbone with `requires_grad_(False)`: with the author's fix alone its parameters still receive gradient that no optimizer holds or clears (a defect of its own, which the watch reports as GG106).
family: frozen-not-frozen
shape: class PL3DVNet(LightningModule): def on_train_epoch_start(self): self.mvsnet.backbone.eval(). def configure_optimizers(self): return torch.optim.Adam([{'params': self.mvsnet.parameters()}, {'params': self.refiner.parameters()}], lr=1e-3). Automatic optimization, 6 batches per epoch, 2 epochs
numeric: the backbone that the paper trains frozen is updated at every step
watch: out: whether a parameter should be trained is the program's intent; nothing in the gradient buffers differs
lint: out: whether a parameter should be trained is the program's intent
bug-step: 1
"""
import lightning as L
import torch
import torch.nn.functional as F

import _gb


class MVSNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU())
        self.feat_shrinker = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.feat_shrinker(self.backbone(x))


class PL3DVNet(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.mvsnet = MVSNet()
        # FIX: self.mvsnet.backbone.requires_grad_(False)  # frozen: no gradient to leave uncleared
        self.refiner = torch.nn.Linear(8, 1)

    def on_train_epoch_start(self):
        self.mvsnet.backbone.eval()  # "frozen" pretrained MnasNet

    def training_step(self, batch, batch_idx):
        x, depth = batch
        return F.l1_loss(self.refiner(self.mvsnet(x)), depth)

    def configure_optimizers(self):
        mvsnet_group = {"params": self.mvsnet.parameters()}  # BUG
        # FIX: mvsnet_group = {"params": self.mvsnet.feat_shrinker.parameters()}
        return torch.optim.Adam([mvsnet_group, {"params": self.refiner.parameters()}], lr=1e-3)


_gb.setup()
model = PL3DVNet()
_gb.start(model)
x = torch.randn(48, 10)
depth = x[:, :3].sum(1, keepdim=True).abs()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, depth), batch_size=8)
trainer = L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator="cpu", devices=1)
trainer.fit(model, loader)
_gb.done(model)

"""Learning-Texture-Invariant-Representation (train_gta2cityscapes.py): the segmentation network's `optimizer.step()` is called before the adversarial loss on the target domain is backpropagated (`loss_adv.backward()`), so the adversarial gradient lands in the network's buffers after its step and is cleared by the next iteration's `optimizer.zero_grad()`: the adversarial term never reaches the segmentation network.

source: MyeongJin-Kim/Learning-Texture-Invariant-Representation#11 (https://github.com/MyeongJin-Kim/Learning-Texture-Invariant-Representation/issues/11), "Adversarial loss not counted by model's optimizer": "In train_gta2cityscapes.py I notice that this line: `# optimize optimizer.step()` is called before the adversarial loss's gradients are calculated: `loss_adv = loss_adv * args.lambda_adv loss_adv.backward()` I believe that implies the loss_adv is not used by the optimizer to update the model's params." (open, no answer: unconfirmed). The script was not read beyond the issue's excerpts: the loop follows the AdaptSegNet pattern it builds on (zero both optimizers; segmentation loss on source and backward; the discriminator's parameters frozen; the adversarial loss on the target prediction and backward; then the discriminator trained on detached predictions and stepped), with the model's step placed before the adversarial backward as the issue quotes; the DeepLab network is reduced to an MLP, the discriminator to an MLP on softmax outputs. The twin steps the model after loss_adv.backward(), the issue's suggestion
family: misplaced-step
shape: SGD(lr=0.05, momentum=0.9) for the model, Adam(lr=1e-3) for the discriminator, lambda_adv 0.5; 6 iterations on batches of 8
numeric: every model step misses the adversarial loss's gradient, which is cleared unapplied
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

lambda_adv = 0.5
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 4))
model_D = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))
_gb.start(model, model_D)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
optimizer_D = torch.optim.Adam(model_D.parameters(), lr=1e-3)
data = [(torch.randn(8, 12), torch.randint(0, 4, (8,)), torch.randn(8, 12) + 0.5) for _ in range(6)]
for images, labels, target_images in data:
    optimizer.zero_grad()
    optimizer_D.zero_grad()
    for param in model_D.parameters():
        param.requires_grad = False
    pred = model(images)
    loss_seg = F.cross_entropy(pred, labels)
    loss_seg.backward()
    optimizer.step()  # BUG
    pred_target = model(target_images)
    D_out = model_D(F.softmax(pred_target, dim=1))
    loss_adv = F.binary_cross_entropy_with_logits(D_out, torch.zeros_like(D_out))
    loss_adv = loss_adv * lambda_adv
    loss_adv.backward()
    # FIX: optimizer.step()
    for param in model_D.parameters():
        param.requires_grad = True
    D_src = model_D(F.softmax(pred.detach(), dim=1))
    D_trg = model_D(F.softmax(pred_target.detach(), dim=1))
    loss_D = 0.5 * (F.binary_cross_entropy_with_logits(D_src, torch.zeros_like(D_src))
                    + F.binary_cross_entropy_with_logits(D_trg, torch.ones_like(D_trg)))
    loss_D.backward()
    optimizer_D.step()
_gb.done(model, model_D)

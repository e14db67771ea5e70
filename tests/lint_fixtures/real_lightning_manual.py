"""Lightning manual optimization is a raw loop (one training_step call per batch); automatic stays silent."""
import lightning as L
import torch
import torch.nn.functional as F


class ForgotZeroGrad(L.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.manual_backward(loss)
        opt.step()  # expect: GG101


class ManualGAN(L.LightningModule):
    def __init__(self, generator, discriminator):
        super().__init__()
        self.generator, self.discriminator = generator, discriminator
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        g_opt, d_opt = self.optimizers()
        fake = self.generator(torch.randn(8, 16))
        g_loss = -self.discriminator(fake).mean()
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()
        d_loss = self.discriminator(fake.detach()).mean() - self.discriminator(batch).mean()
        self.manual_backward(d_loss)
        d_opt.step()  # expect: GG101


# --- correct: no finding -------------------------------------------------------
class ManualCorrect(L.LightningModule):
    def __init__(self, generator, discriminator):
        super().__init__()
        self.generator, self.discriminator = generator, discriminator
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        g_opt, d_opt = self.optimizers()
        fake = self.generator(torch.randn(8, 16))
        g_loss = -self.discriminator(fake).mean()
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()
        d_loss = self.discriminator(fake.detach()).mean() - self.discriminator(batch).mean()
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()


class Automatic(L.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        return loss

    def backward(self, loss, *args, **kwargs):
        loss.backward()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())

"""GG203 must stay silent: every term that reaches backward() carries its graph, or the cut is deliberate."""
import torch
import torch.nn.functional as F


class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 8)

    def forward(self, frames):
        terms, x = [], frames[:, 0]
        for t in range(frames.size(1)):
            h = torch.tanh(self.cell(x))
            terms.append(F.cosine_similarity(h, x, dim=1).abs().mean())
            x = h
        aux = torch.mean(torch.stack(terms, dim=0))
        return self.out(x), aux


def attention_terms_attached(student, teacher, loader, optimizer, betas=(500.0, 1000.0)):
    for x, y in loader:
        *feats, logits = student(x)
        with torch.no_grad():
            *feats_t, _ = teacher(x)
        at = [b * (s - t).pow(2).mean() for b, s, t in zip(betas, feats, feats_t)]
        logged = [a.detach() for a in at]
        loss = F.cross_entropy(logits, y) + sum(at)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return logged


def adversarial_term_kept(encoder, decoder, disc, loader, optimizer):
    for x, target in loader:
        feat = encoder(x)
        adv = F.binary_cross_entropy_with_logits(disc(feat), torch.ones(x.size(0), 1))
        adv_value = adv.item()
        loss = F.l1_loss(decoder(feat), target) + 0.01 * adv
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return adv_value


def stacked_in_forward(loader, optimizer):
    model = Recurrent()
    for frames in loader:
        pred, aux = model(frames)
        loss = F.mse_loss(pred, frames[:, -1]) + 0.1 * aux
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def straight_through(model, loader, optimizer):
    for x, y in loader:
        soft = torch.softmax(model(x), -1)
        hard = F.one_hot(soft.argmax(-1), soft.size(-1)).float()
        loss = F.mse_loss(soft + (hard - soft).detach(), F.one_hot(y, soft.size(-1)).float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def value_correction_subtracted(model, loader, optimizer):
    for x, y in loader:
        logp = torch.log_softmax(model(x), -1).gather(1, y[:, None]).squeeze(1)
        loss = -(logp.mean() - logp.mean().detach()) + F.nll_loss(torch.log_softmax(model(x), -1), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def detached_target_and_weights(model, target_model, loader, optimizer, gamma=0.99):
    for s, a, r, s2 in loader:
        q = model(s).gather(1, a[:, None]).squeeze(1)
        target = r + gamma * target_model(s2).max(1).values.detach()
        weight = (q - target).abs().detach() + 1.0
        loss = (weight * (q - target) ** 2).mean() + 0.01 * q.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def discriminator_on_detached_fake(gen, disc, loader, opt_d):
    for z, real in loader:
        fake = gen(z)
        d_loss = F.softplus(-disc(real)).mean() + F.softplus(disc(fake.detach())).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()


def constant_and_data_terms(model, loader, optimizer, weights):
    for x, y in loader:
        with torch.no_grad():
            baseline = model(x).mean()
        loss = F.cross_entropy(model(x), y) + baseline + torch.tensor(0.5) + float(len(weights))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def adaptive_weight_from_a_number(model, loader, optimizer):
    for x, y in loader:
        out = model(x)
        ce = F.cross_entropy(out, y)
        reg = out.pow(2).mean()
        lam = ce.item() / (reg.item() + 1e-8)
        loss = ce + lam * reg
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

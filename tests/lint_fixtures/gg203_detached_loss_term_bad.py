"""GG203: a term added into the differentiated loss that was cut from the graph."""
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
        aux = torch.mean(torch.tensor([d.item() for d in terms]))  # expect: GG203
        return self.out(x), aux


def attention_terms_detached(student, teacher, loader, optimizer):
    betas = (500.0, 1000.0)
    for x, y in loader:
        *feats, logits = student(x)
        with torch.no_grad():
            *feats_t, _ = teacher(x)
        at = [b * (s - t).pow(2).mean().detach() for b, s, t in zip(betas, feats, feats_t)]  # expect: GG203
        loss = F.cross_entropy(logits, y) + sum(at)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def adversarial_term_as_number(encoder, decoder, disc, loader, optimizer):
    for x, target in loader:
        feat = encoder(x)
        adv = F.binary_cross_entropy_with_logits(disc(feat), torch.ones(x.size(0), 1))
        adv = adv.item()  # expect: GG203
        loss = F.l1_loss(decoder(feat), target) + 0.01 * adv
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def rebuilt_in_forward(loader, optimizer):
    model = Recurrent()
    for frames in loader:
        pred, aux = model(frames)
        loss = F.mse_loss(pred, frames[:, -1]) + 0.1 * aux
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def values_read_as_numbers(model, loader, optimizer):
    for obs in loader:
        logits, value = model(obs)
        values = []
        for v in value:
            values.append(float(v))  # expect: GG203
        returns = torch.tensor([0.99 ** k for k in range(len(values))])
        v_loss = F.mse_loss(torch.tensor(values), returns)
        pg_loss = -torch.log_softmax(logits, -1).mean()
        optimizer.zero_grad()
        (pg_loss + 0.5 * v_loss).backward()
        optimizer.step()


def data_attribute_term(model, reg, loader, optimizer):
    for x, y in loader:
        out = model(x)
        loss = F.cross_entropy(out, y) + 1e-3 * reg(model).data  # expect: GG203
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

"""GG201: correct code of the same shapes (no finding expected)."""
import torch


def cifar_tutorial_counts(net, trainloader, criterion, optimizer, accum):
    # PyTorch's CIFAR-10 tutorial with accuracy bookkeeping next to the loss
    correct, total = 0, 0
    for i, (inputs, labels) in enumerate(trainloader):
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, labels) / accum
        loss.backward()
        optimizer.step()
        _, predicted = torch.max(outputs.data, 1)
        total += labels.size(0)
        correct += (predicted == labels).sum().item()
        total = total + labels.size(0)
    return correct / total


def masked_token_count(model, loader, optimizer):
    tokens = 0
    for x, y, mask in loader:
        optimizer.zero_grad()
        loss = (model(x, y) * mask).sum() / mask.sum()
        loss.backward()
        optimizer.step()
        tokens += mask.sum()
    return tokens


def regulariser_weight(model, loader, loss_fn, optimizer, lam, loss_weight):
    reg_total, weight_total = 0.0, 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_weight * loss_fn(model(x), y) + lam * model.penalty()
        loss.backward()
        optimizer.step()
        reg_total += lam
        weight_total += loss_weight


def token_weighted_loss(model, loader, loss_fn, optimizer):
    # torchtune: the loss is weighted by the micro-batch's token count
    num_tokens = 0
    running_loss = 0
    for batch in loader:
        optimizer.zero_grad()
        labels = batch["labels"]
        current_num_tokens = (labels != -100).sum()
        loss = loss_fn(model(batch["tokens"]), labels) * current_num_tokens
        num_tokens += current_num_tokens
        running_loss += loss.detach()
        running_loss += loss.cpu().numpy()
        loss.backward()
        optimizer.step()


def with_item(model, loader, loss_fn, optimizer):
    total_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
        total_loss += loss.detach() * 0
        total_loss += float(loss)
    return total_loss


def under_no_grad(model, loader, loss_fn, optimizer):
    total = torch.zeros(())
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            total += loss


def summed_then_backward(model, loader, loss_fn, optimizer, heads):
    for x, y in loader:
        optimizer.zero_grad()
        total = 0
        for head in heads:
            loss = loss_fn(head(model(x)), y)
            total += loss
        total.backward()
        optimizer.step()


def building_the_loss(model, loader, loss_fn, optimizer, reg):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss += reg(model)
        loss.backward()
        optimizer.step()


class SetCriterion:
    """A criterion that collects its loss terms and returns their sum: the caller back-propagates it."""

    def forward(self, outputs, targets):
        terms = []
        for name, out in outputs.items():
            term_loss = self.compute(out, targets[name])
            terms += [term_loss]
        loss = sum(terms)
        return loss


def parse_logged_losses(history):
    """Values logged earlier (buffers of numbers), averaged: nothing computed here has a graph."""
    all_loss = 0
    for name, buffer in history.items():
        avg_loss = buffer.mean()
        if "loss" in name:
            all_loss += avg_loss
    return all_loss


def meta_loss_over_tasks(learner, tasks, loss_fn, meta_opt, n_tasks):
    """The task losses summed are the meta-loss: it is divided and back-propagated under another name."""
    for it in range(10):
        iteration_loss = 0.0
        for task in tasks:
            clone = learner.clone()
            loss = loss_fn(clone, task)
            iteration_loss += loss
        adaptation_loss = iteration_loss / n_tasks
        meta_opt.zero_grad()
        adaptation_loss.backward()
        meta_opt.step()


def detection_loss_logged(pred, target):
    box = (pred[:, :4] - target[:, :4]).abs().mean()
    cls = torch.nn.functional.binary_cross_entropy_with_logits(pred[:, 4:], target[:, 4:])
    return box + cls, {"BoxLoss": box.detach(), "BCELoss": cls.detach()}


def detached_loss_parts_summed_into_a_dict(model, loader, optimizer, totals):
    for images, targets in loader:
        optimizer.zero_grad()
        loss, parts = detection_loss_logged(model(images), targets)
        loss.backward()
        optimizer.step()
        for name, value in parts.items():
            totals[name] += value * images.shape[0]


def loss_parts_summed_as_numbers(model, loader, optimizer, totals):
    for images, targets in loader:
        optimizer.zero_grad()
        loss, parts = detection_loss(model(images), targets)
        loss.backward()
        optimizer.step()
        for name, value in parts.items():
            totals[name] += value.item() * images.shape[0]


def detection_loss(pred, target):
    box = (pred[:, :4] - target[:, :4]).abs().mean()
    cls = torch.nn.functional.binary_cross_entropy_with_logits(pred[:, 4:], target[:, 4:])
    return box + cls, {"BoxLoss": box, "BCELoss": cls}


def evaluate_loss_computed_under_no_grad(model, loader, criterion):
    total = 0
    for x, y in loader:
        with torch.no_grad():
            loss = criterion(model(x), y)
        total += loss  # computed without a graph: nothing kept alive
    return total

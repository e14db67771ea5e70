"""GG101: a loop that back-propagates and steps but clears nothing on some path."""
import torch
from transformers import Trainer

import gradguard as gg


def forgot_zero_grad(model, loader, loss_fn):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()  # expect: GG101


def while_loop(model, batches, loss_fn, opt):
    it = iter(batches)
    while True:
        x, y = next(it)
        with torch.autocast("cpu"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()  # expect: GG101


def clear_only_sometimes(model, loader, loss_fn, optimizer, log):
    for i, (x, y) in enumerate(loader):
        if log:
            optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()  # expect: GG101


def clear_every_fourth_step_every_time(model, loader, loss_fn, opt):
    # zero_grad on every 4th iteration only, step on every one: 3 of 4 steps reuse gradients
    for i, (x, y) in enumerate(loader):
        if i % 4 == 0:
            opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()  # expect: GG101


def clear_every_fourth_in_train_mode(model, loader, loss_fn, opt, training):
    for i, (x, y) in enumerate(loader):
        if i % 4 == 0:
            opt.zero_grad()
        if training:
            loss_fn(model(x), y).backward()
            opt.step()  # expect: GG101


def _update(optimizer):
    optimizer.step()  # expect: GG101


def step_in_a_helper(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        _update(optimizer)


def one_step(model, batch, optimizer):
    model(batch).mean().backward()
    optimizer.step()  # expect: GG101


def everything_in_a_helper(model, loader, optimizer):
    for batch in loader:
        one_step(model, batch, optimizer)


def accumulate_without_clearing(model, loader, loss_fn, optimizer, accum):
    for step in range(1000):
        for micro_step in range(accum):
            (loss_fn(model(step), micro_step) / accum).backward()
        optimizer.step()  # expect: GG101


class Trainer:  # a plain class, not a framework base
    def fit(self, loader):
        for x, y in loader:
            self.loss(x, y).backward()
            self.opt.step()  # expect: GG101


def grads_to_none_when_present(model, loader, loss_fn, optimizer, clear):
    for x, y in loader:
        if clear:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.detach_()
                    p.grad.zero_()
        loss_fn(model(x), y).backward()
        optimizer.step()  # expect: GG101


def accumulator_or_plain_without_clearing(model, data, opt, loss_fn, use_accum):
    # the Accumulator branch is fine; the plain branch never clears
    acc = gg.Accumulator(opt, steps=4) if use_accum else None
    for x, y in data:
        if use_accum:
            acc.backward(loss_fn(model(x), y), count=len(y))
            acc.step()
        else:
            loss_fn(model(x), y).backward()
            opt.step()  # expect: GG101


def new_optimizer_each_batch(model, loader, loss_fn):
    """A new optimizer every batch, over the same module: its .grad still grows."""
    for x, y in loader:
        sgd = torch.optim.SGD(model.parameters(), 0.1)
        loss_fn(model(x), y).backward()
        sgd.step()  # expect: GG101


class RolloutTrainer(Trainer):
    """Derives from the HF Trainer but runs its own loop in train(): checked like raw PyTorch."""

    def train(self):
        for epoch in range(self.args.num_ppo_epochs):
            for mb in self.minibatches():
                with self.accelerator.accumulate(self.model):
                    loss = self.policy_loss(mb)
                    self.accelerator.backward(loss)
                    self.optimizer.step()  # expect: GG101


def _step_then_maybe_clear(optimizer, zero_grad=True):
    optimizer.step()  # expect: GG101
    if zero_grad:
        optimizer.zero_grad()


def clearing_flag_passed_false(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        _step_then_maybe_clear(optimizer, zero_grad=False)  # the helper never clears here


class GanWithoutDiscriminatorClearing:
    """The optimizers are attributes built in __init__; the loop calls the object's step()."""

    def __init__(self, generator, discriminator):
        self.generator, self.discriminator = generator, discriminator
        self.optD = torch.optim.Adam(self.discriminator.parameters())
        self.optG = torch.optim.Adam(self.generator.parameters())

    def update(self, real, noise, bce):
        bce(self.discriminator(real), 1).backward()
        fake = self.generator(noise)
        bce(self.discriminator(fake.detach()), 0).backward()
        self.optD.step()  # expect: GG101
        self.generator.zero_grad()
        bce(self.discriminator(fake), 1).backward()
        self.optG.step()


def train_gan_object(generator, discriminator, batches, noise, bce):
    gan = GanWithoutDiscriminatorClearing(generator, discriminator)
    for real in batches:
        gan.update(real, noise, bce)


def optimizer_bound_to_a_name_saying_scheduler(model, loader, loss_fn):
    """What the object is comes from its constructor, not from the variable's name."""
    lr_scheduler = torch.optim.Adam(model.parameters())
    for x, y in loader:
        loss_fn(model(x), y).backward()
        lr_scheduler.step()  # expect: GG101


def reset_grad_that_clears_nothing(model):
    for p in model.parameters():
        p.requires_grad_(True)


def helper_named_like_a_clearing(model, loader, loss_fn, opt):
    """`reset_grad` is in view: it switches requires_grad on, it clears nothing."""
    for x, y in loader:
        reset_grad_that_clears_nothing(model)
        loss_fn(model(x), y).backward()
        opt.step()  # expect: GG101


class BaseTrainer:
    """The project's own trainer base: its name ends in Trainer, it is no HF Trainer."""

    def __init__(self, model, optimizer, loss_fn):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn


class PPOTrainer(BaseTrainer):
    def optimize(self, minibatches):
        for x, y in minibatches:
            self.loss_fn(self.model(x), y).backward()
            self.optimizer.step()  # expect: GG101


def training_step(engine, batch, model, optimizer, loss_fn):
    """A function named like Lightning's hook, outside any LightningModule (an ignite handler)."""
    for x, y in batch:
        loss_fn(model(x), y).backward()
        optimizer.step()  # expect: GG101


def create_ignite_trainer(model, optimizer, loss_fn):
    """ignite's Engine calls update(engine, batch) once per batch: its body is one iteration."""
    from ignite.engine import Engine

    def update(engine, batch):
        x, y = batch
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()  # expect: GG101
        return loss.item()

    return Engine(update)


def one_optimizer_two_modules_one_cleared(loader, loss_fn):
    """encoder.zero_grad() clears the encoder only: the decoder's .grad grows every step."""
    encoder = torch.nn.Linear(4, 8)
    decoder = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(list(encoder.parameters()) + list(decoder.parameters()), lr=0.1)
    for x in loader:
        encoder.zero_grad()
        loss_fn(decoder(encoder(x)), x).backward()
        optimizer.step()  # expect: GG101


def amp_chosen_once_clears_in_one_branch(model, loader, loss_fn, optimizer, scaler, accum):
    """AMP is decided once for the run: the plain run never reaches the AMP branch's clearing."""
    use_amp = scaler is not None
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % accum == 0:
            if use_amp:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            else:
                optimizer.step()  # expect: GG101
    assert len(loader) % accum == 0


class TD3StyleAgent:
    """The agent's train() has no loop of its own: the script calls it once per environment
    step. Nothing in the code clears its optimizers, so each call steps every earlier call's
    gradients too."""

    def __init__(self, actor, critic):
        self.actor = actor
        self.critic = critic
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=3e-4)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=3e-4)

    def train(self, state, target_q):
        critic_loss = torch.nn.functional.mse_loss(self.critic(state), target_q)
        critic_loss.backward()
        self.critic_optimizer.step()  # expect: GG101
        actor_loss = -self.critic(self.actor(state)).mean()
        actor_loss.backward()
        self.actor_optimizer.step()  # expect: GG101


def ignite_episode_handler_without_clearing(policy, optimizer, env, episodes):
    """ignite's reinforcement learning examples: the Engine's process function only plays, a
    handler of every epoch (an episode) back-propagates and steps through a helper."""
    from ignite.engine import Engine, Events

    def play(engine, timestep):
        policy.rewards.append(env.step(policy.act(engine.state.observation)))

    trainer = Engine(play)

    @trainer.on(Events.EPOCH_COMPLETED)
    def update_model():
        learn_from_episode(policy, optimizer)

    trainer.run(range(1000), max_epochs=episodes)


def learn_from_episode(policy, optimizer):
    loss = -torch.stack(policy.log_probs).sum() * sum(policy.rewards)
    loss.backward()
    optimizer.step()  # expect: GG101
    del policy.rewards[:]


def engine_loop(model, loader, loss_fn, config):
    import deepspeed

    w, *_ = deepspeed.initialize(model=model, config=config)
    for x, y in loader:
        w.backward(loss_fn(w(x), y))
        w.step()


def plain_solver_beside_an_engine_loop(model, loader, loss_fn, solver):
    """The only object a back-propagating function steps is its optimizer, whatever its name; an
    engine handed the loss elsewhere in the file (it clears itself) changes nothing for it."""
    for x, y in loader:
        loss_fn(model(x), y).backward()
        solver.step()  # expect: GG101

def one_module_in_two_optimizers(encoder, head, loader, loss_fn):
    opt_enc = torch.optim.SGD(encoder.parameters(), lr=0.1)
    opt_all = torch.optim.Adam(list(encoder.parameters()) + list(head.parameters()), lr=1e-3)
    for x, y in loader:
        loss = loss_fn(head(encoder(x)), y)
        loss.backward()
        opt_enc.step()
        opt_all.step()  # expect: GG101
        opt_enc.zero_grad()
        opt_all.zero_grad()


class SharedEncoder:
    def __init__(self, encoder, head):
        self.encoder, self.head = encoder, head
        self.fast = torch.optim.SGD([{"params": self.encoder.parameters()}], lr=0.1)
        self.slow = torch.optim.SGD(self.head.parameters(), lr=0.01)
        self.slow.add_param_group({"params": []})
        self.both = torch.optim.SGD([*self.head.parameters(), *self.encoder.parameters()], lr=0.01)

    def fit(self, loader):
        for x in loader:
            self.head(self.encoder(x)).sum().backward()
            self.both.step()
            self.fast.step()  # expect: GG101
            self.both.zero_grad()
            self.fast.zero_grad()


def step_under_either_part(model, loader, opt, main, head):
    for x, y in loader:
        loss = ((model(x) - y) ** 2).mean()
        if main:
            if head is not None:
                opt.zero_grad(set_to_none=True)
        loss.backward()
        if head is not None or main:
            opt.step()  # expect: GG101

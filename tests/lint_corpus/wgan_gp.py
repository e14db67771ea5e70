"""WGAN-GP: n_critic critic steps per generator step, gradient penalty through torch.autograd.grad."""
import torch


def compute_gradient_penalty(D, real_samples, fake_samples):
    alpha = torch.rand(real_samples.size(0), 1, device=real_samples.device)
    interpolates = (alpha * real_samples + (1 - alpha) * fake_samples).requires_grad_(True)
    d_interpolates = D(interpolates)
    gradients = torch.autograd.grad(
        outputs=d_interpolates,
        inputs=interpolates,
        grad_outputs=torch.ones_like(d_interpolates),
        create_graph=True,
        retain_graph=True,
        only_inputs=True,
    )[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


def train(generator, discriminator, dataloader, n_epochs, latent_dim, n_critic=5, lambda_gp=10):
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=1e-4, betas=(0.0, 0.9))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=1e-4, betas=(0.0, 0.9))
    batches_done = 0
    for epoch in range(n_epochs):
        for i, (imgs, _) in enumerate(dataloader):
            optimizer_D.zero_grad()
            z = torch.randn(imgs.shape[0], latent_dim)
            fake_imgs = generator(z)
            real_validity = discriminator(imgs)
            fake_validity = discriminator(fake_imgs.detach())
            gradient_penalty = compute_gradient_penalty(discriminator, imgs.data, fake_imgs.data)
            d_loss = -torch.mean(real_validity) + torch.mean(fake_validity) + lambda_gp * gradient_penalty
            d_loss.backward()
            optimizer_D.step()
            if i % n_critic == 0:
                optimizer_G.zero_grad()
                fake_imgs = generator(z)
                g_loss = -torch.mean(discriminator(fake_imgs))
                g_loss.backward()
                optimizer_G.step()
                print(f"[Epoch {epoch}] [D loss: {d_loss.item()}] [G loss: {g_loss.item()}]")
                batches_done += n_critic

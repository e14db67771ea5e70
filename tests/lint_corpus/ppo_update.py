"""PPO update: several epochs of minibatches over one rollout, one shared optimizer, clipped gradients."""
import torch
import torch.nn as nn


def ppo_update(agent, optimizer, rollout, update_epochs=4, num_minibatches=4, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5):
    b_obs, b_actions, b_logprobs, b_advantages, b_returns = rollout
    batch_size = b_obs.shape[0]
    minibatch_size = batch_size // num_minibatches
    b_inds = torch.randperm(batch_size)
    clipfracs = []
    for epoch in range(update_epochs):
        for start in range(0, batch_size, minibatch_size):
            mb_inds = b_inds[start : start + minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
            logratio = newlogprob - b_logprobs[mb_inds]
            ratio = logratio.exp()
            with torch.no_grad():
                clipfracs += [((ratio - 1.0).abs() > clip_coef).float().mean().item()]
            mb_advantages = b_advantages[mb_inds]
            pg_loss1 = -mb_advantages * ratio
            pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
            pg_loss = torch.max(pg_loss1, pg_loss2).mean()
            v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb_inds]) ** 2).mean()
            loss = pg_loss - ent_coef * entropy.mean() + v_loss * vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
    return clipfracs

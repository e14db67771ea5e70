"""SimCLR-style contrastive training with autocast and a GradScaler, step per batch."""
import torch
import torch.nn.functional as F


def info_nce_loss(features, batch_size, temperature=0.07):
    labels = torch.cat([torch.arange(batch_size) for _ in range(2)], dim=0)
    labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float().to(features.device)
    features = F.normalize(features, dim=1)
    similarity_matrix = torch.matmul(features, features.T)
    mask = torch.eye(labels.shape[0], dtype=torch.bool, device=features.device)
    labels = labels[~mask].view(labels.shape[0], -1)
    similarity_matrix = similarity_matrix[~mask].view(similarity_matrix.shape[0], -1)
    positives = similarity_matrix[labels.bool()].view(labels.shape[0], -1)
    negatives = similarity_matrix[~labels.bool()].view(similarity_matrix.shape[0], -1)
    logits = torch.cat([positives, negatives], dim=1) / temperature
    return logits, torch.zeros(logits.shape[0], dtype=torch.long, device=features.device)


def train(model, optimizer, scheduler, train_loader, epochs, device, fp16=True):
    scaler = torch.amp.GradScaler("cuda", enabled=fp16)
    criterion = torch.nn.CrossEntropyLoss()
    n_iter = 0
    for epoch_counter in range(epochs):
        epoch_loss = 0.0
        for images, _ in train_loader:
            images = torch.cat(images, dim=0).to(device)
            with torch.autocast("cuda", enabled=fp16):
                features = model(images)
                logits, labels = info_nce_loss(features, images.shape[0] // 2)
                loss = criterion(logits, labels)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            epoch_loss += loss.item()
            n_iter += 1
        if epoch_counter >= 10:
            scheduler.step()
        print(f"Epoch: {epoch_counter}\tLoss: {epoch_loss}")

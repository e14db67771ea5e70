"""Standalone-DeepLearning Lab7 (CIFAR-10 with a CNN): `optimizer.zero_grad()` is called once per epoch, before the batch loop, so every step re-applies the gradients of all earlier batches of the epoch.

source: heartcored98/Standalone-DeepLearning#11 (https://github.com/heartcored98/Standalone-DeepLearning/issues/11), "zero_grad() 질문 있습니다." ("a question about zero_grad()"): "epoch 당 zero_grad()를 한 번 사용하시던데요! loss.backward()를 사용할 때마다 그 전에 zero_grad()를 해야 하는게 아닌가요??" (you call zero_grad() once per epoch; shouldn't it come before every loss.backward()?), pointing to Lec5/Lab7_CIFAR-10_with_CNN.ipynb. The author: "앗 그런 실수를 했었군요..!" (oh, I made that mistake) and later "여러 랩 코드에 있었던 동일한 오류를 모두 수정하였습니다" (fixed the same error in several labs' code). The notebook's code was not read; the loop is the one the issue describes. The twin clears before every backward
family: missing-clear
shape: def train(net, partition, optimizer, criterion, args): trainloader = DataLoader(partition['train'], batch_size=args.train_batch_size, shuffle=True); net.train(); optimizer.zero_grad(); for i, data in enumerate(trainloader, 0): inputs, labels = data; outputs = net(inputs); loss = criterion(outputs, labels); loss.backward(); optimizer.step(). A small CNN, SGD with momentum, 4 batches per epoch, 2 epochs
numeric: the k-th step of an epoch applies the sum of the epoch's first k batch gradients
watch: GG101
lint: GG101
bug-step: 2
"""
import argparse

import torch

import _gb


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.fc = torch.nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        return self.fc(self.conv(x).flatten(1))


def train(net, partition, optimizer, criterion, args):
    trainloader = torch.utils.data.DataLoader(partition["train"], batch_size=args.train_batch_size, shuffle=False)
    net.train()
    optimizer.zero_grad()  # BUG
    for i, data in enumerate(trainloader, 0):
        inputs, labels = data
        # FIX: optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()


_gb.setup()
net = CNN()
_gb.start(net)
images = torch.randn(32, 3, 8, 8)
partition = {"train": torch.utils.data.TensorDataset(images, images.mean(dim=(1, 2, 3)).gt(0).long() * 3)}
args = argparse.Namespace(train_batch_size=8, lr=0.05, mm=0.9)
optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.mm)
criterion = torch.nn.CrossEntropyLoss()
for epoch in range(2):
    train(net, partition, optimizer, criterion, args)
_gb.done(net)

"""zhaoyingjun/chatbot's PyTorch seq2seq training: `train()` receives an encoder optimizer and a decoder optimizer, but the call passes `optim.SGD(encoder1.parameters(), ...)` as the decoder's, so each iteration steps the encoder twice with the same gradient while the attention decoder's gradients are never applied (nor ever cleared).

source: zhaoyingjun/chatbot#115 (https://github.com/zhaoyingjun/chatbot/issues/115), "torch版本seq2seq训练优化器输入是否有bug" (open): "最后一个参数应该输入`optim.SGD(attn_decoder1.parameters(), lr=0.001)`吧" (the last argument should be optim.SGD(attn_decoder1.parameters(), lr=0.001)); the maintainer: "嗯 是的 感谢提出来" (yes, thanks for pointing it out). The train() of the PyTorch seq2seq tutorial the file follows (zero both optimizers, encode, decode with teacher forcing, backward, step both) is kept, the decoder's optimizer built in each iteration as the call builds it; the attention decoder is reduced to a GRU decoder without attention, on random token pairs. The twin passes the decoder's parameters
family: wrong-optimizer
shape: SGD(lr=0.01) twice, 6 iterations on sentence pairs of 5 tokens (vocabulary 15, hidden 16)
numeric: the encoder moves by two SGD steps per iteration; the decoder never moves
watch: GG101 GG106
lint: GG101
bug-step: 1
"""
import torch
import torch.nn.functional as F
from torch import optim

import _gb

vocab, hidden = 15, 16


class EncoderRNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding, self.gru = torch.nn.Embedding(vocab, hidden), torch.nn.GRU(hidden, hidden, batch_first=True)

    def forward(self, tokens):
        return self.gru(self.embedding(tokens))[1]


class DecoderRNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding, self.gru = torch.nn.Embedding(vocab, hidden), torch.nn.GRU(hidden, hidden, batch_first=True)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, tokens, h):
        out, h = self.gru(self.embedding(tokens), h)
        return F.log_softmax(self.out(out), -1), h


def train(input_tensor, target_tensor, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion):
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    h = encoder(input_tensor)
    decoder_input = torch.cat([torch.zeros(1, 1, dtype=torch.long), target_tensor[:, :-1]], 1)  # teacher forcing
    out, _ = decoder(decoder_input, h)
    loss = criterion(out.flatten(0, 1), target_tensor.flatten())
    loss.backward()
    encoder_optimizer.step()
    decoder_optimizer.step()
    return loss.item()


_gb.setup()
encoder1, attn_decoder1 = EncoderRNN(), DecoderRNN()
_gb.start(encoder1, attn_decoder1)
encoder_optimizer = optim.SGD(encoder1.parameters(), lr=0.01)
for iteration in range(6):
    pair = torch.randint(1, vocab, (1, 5)), torch.randint(1, vocab, (1, 5))
    decoder_optimizer = optim.SGD(encoder1.parameters(), lr=0.01)  # BUG
    # FIX: decoder_optimizer = optim.SGD(attn_decoder1.parameters(), lr=0.01)
    train(pair[0], pair[1], encoder1, attn_decoder1, encoder_optimizer, decoder_optimizer, torch.nn.NLLLoss())
_gb.done(encoder1, attn_decoder1)

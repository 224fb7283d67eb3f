import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)

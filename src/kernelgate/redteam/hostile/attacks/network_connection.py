"""Hostile (template): at import, open a TCP connection and send a UDP datagram.

Both go to listeners the runner holds on 127.0.0.1 (the only addresses the suite aims at);
a candidate that can reach them could as well reach anything else the machine can.
"""

import socket

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)


def _tcp() -> str:
    with socket.create_connection(("127.0.0.1", ARENA.tcp_port), timeout=2.0) as connection:
        connection.sendall(f"hostile {ARENA.token}\n".encode())
    return f"connected to 127.0.0.1:{ARENA.tcp_port}"


def _udp() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as datagram:
        sent = datagram.sendto(f"hostile {ARENA.token}".encode(), ("127.0.0.1", ARENA.udp_port))
    return f"sent {sent} bytes to udp 127.0.0.1:{ARENA.udp_port}"


LINES = [kit.attempt(ARENA, "tcp-connect", _tcp), kit.attempt(ARENA, "udp-send", _udp)]


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        kit.fail_loudly(LINES)
        return torch.zeros_like(a)

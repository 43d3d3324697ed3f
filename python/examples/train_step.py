"""A few training steps of a small causal self-attention model with flashattn.

    python3 python/examples/train_step.py [--device cpu|cuda] [--dtype float32|bfloat16]
                                          [--steps N] [--compile]

The model: token embedding, one attention block (grouped-query heads, a learned sink logit
per head, causal mask) and a projection back to the vocabulary, trained to predict the next
token of a fixed random sequence (so the loss must fall). The attention call is
flashattn.flash_attn_func; its backward gives the gradients of q, k, v and the sinks.
"""
import argparse
import time

import torch
import torch.nn as nn

import flashattn


class Block(nn.Module):
    def __init__(self, dim=128, heads=8, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.norm = nn.LayerNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wkv = nn.Linear(dim, 2 * kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.sinks = nn.Parameter(torch.zeros(heads))   # fp32 sink logits, one per head

    def forward(self, x):
        B, S, _ = x.shape
        h = self.norm(x)
        q = self.wq(h).view(B, S, self.heads, self.hd)
        kv = self.wkv(h).view(B, S, 2, self.kv_heads, self.hd)
        # k and v are strided views of kv: flashattn reads them in place
        out = flashattn.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], causal=True,
                                        sinks=self.sinks)
        return x + self.wo(out.reshape(B, S, -1))


class Model(nn.Module):
    def __init__(self, vocab=256, dim=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.block = Block(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.block(self.emb(tokens)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    # in bfloat16 the sinks too: flashattn hands the C library an fp32 copy and the
    # gradient comes back through that conversion
    model = Model().to(dev, dtype)
    step_fn = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, 256, (4, 129), device=dev)
    x, y = tokens[:, :-1], tokens[:, 1:]
    print("flashattn %s (%s), torch %s, device %s, %s"
          % (flashattn.library_version(), flashattn.library_path, torch.__version__, dev,
             args.dtype))
    first = last = None
    t0 = time.perf_counter()
    for step in range(args.steps):
        logits = step_fn(x)
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        assert model.block.sinks.grad is not None and torch.isfinite(model.block.sinks.grad).all()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
        if step % 5 == 0 or step == args.steps - 1:
            print("step %3d  loss %.4f" % (step, last))
    print("%d steps in %.2f s; loss %.4f -> %.4f" % (args.steps, time.perf_counter() - t0,
                                                     first, last))
    if not last < first:
        raise SystemExit("train_step: the loss did not fall")


if __name__ == "__main__":
    main()

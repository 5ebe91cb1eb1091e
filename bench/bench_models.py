"""The benchmarks' model: the PyTorch reference DANet (tests/reference/danet_ref.py) with
random weights and neutral BatchNorm statistics (mean 0, variance 1) and nonzero attention
gammas, so every path (both attention branches included) does real work. Speed does not
depend on the weights; this only keeps the activations finite and the three peers equal.
"""


def random_danet(spec, seed=0):
    """`DANet(spec)` in eval mode, seeded, BN statistics neutral, gammas +-0.5."""
    import torch
    from danet_ref import DANet
    torch.manual_seed(seed)
    model = DANet(spec).eval()
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("running_var"):
                t.fill_(1.0)
            elif name.endswith("running_mean"):
                t.zero_()
            elif name.endswith("sa.gamma"):
                t.fill_(0.5)
            elif name.endswith("sc.gamma"):
                t.fill_(-0.5)
    return model

"""Control: a benchmark-style loop (nanoGPT's bench.py with real_data=False) on one fixed
synthetic batch, with wide matrix multiplies in forward and backward. Nothing on the host
competes with the compute."""
import torch


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 1024))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024)
    y = torch.randn(256, 1024)
    for step in range(20):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()

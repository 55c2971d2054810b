"""Saving sample images from the training loop: as the DCGAN example does with
`vutils.save_image(real_cpu, ...)` and `vutils.save_image(fake.detach(), ...)`, but after every
step instead of every 100. Encoding two 16-image PNG grids is the loop's time."""
import os
import tempfile

import torch
import torchvision.utils as vutils


class Generator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.ConvTranspose2d(16, 8, 4, 1, 0), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(8, 3, 4, 4, 0), torch.nn.Tanh())

    def forward(self, z):
        return torch.nn.functional.interpolate(self.net(z), size=64)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    netG = Generator()
    opt = torch.optim.Adam(netG.parameters(), lr=2e-4)
    real = torch.rand(16, 3, 64, 64) * 2 - 1
    with tempfile.TemporaryDirectory() as outf:
        # Long enough (about 3 s on an idle machine) for the sampler to see the loop: 24 steps
        # took 0.7 s, too few stack samples when nothing else slowed the job down.
        for step in range(100):
            noise = torch.randn(16, 16, 1, 1)
            fake = netG(noise)
            loss = (fake - real).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            vutils.save_image(real, os.path.join(outf, "real_samples.png"), normalize=True)
            vutils.save_image(fake.detach(), os.path.join(outf, f"fake_samples_{step:03d}.png"),
                              normalize=True)


if __name__ == "__main__":
    main()

"""gpufeed tune's fake-driver job: a loop whose step is twice as fast once torch's fp32 matmul
precision is "high" (TF32), as fp32 matmuls on tensor cores are. Runs with the stand-in torch
(tests/data/fake_torch) and reports steps with no data wait through gpufeed_probe."""
import time

import torch

import gpufeed_probe

while True:
    fast = torch.get_float32_matmul_precision() != "highest"
    time.sleep(0.005 if fast else 0.010)
    gpufeed_probe.step(wait_ns=0)

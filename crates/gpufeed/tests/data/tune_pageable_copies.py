"""gpufeed tune's fake-driver job for pageable copies: a loop whose step takes half as long once
its DataLoader has pin_memory=True (copies from pinned memory overlap the step). Runs with the
stand-in torch (tests/data/fake_torch), whose DataLoader keeps its arguments, and reports steps
with no data wait through gpufeed_probe."""
import time

from torch.utils.data import DataLoader

import gpufeed_probe

loader = DataLoader(list(range(64)), batch_size=8, shuffle=True, pin_memory=False)
step_s = 0.005 if loader.pin_memory else 0.010
while True:
    time.sleep(step_s)
    gpufeed_probe.step(wait_ns=0)

"""Control: a data-preparation script with no training loop at all (as a prepare.py that
tokenizes a corpus before training): it writes text files, encodes them character by character
and writes train/val token files with numpy. No model, no steps."""
import os
import pickle
import random
import tempfile

import numpy as np


def write_corpus(root, files):
    rng = random.Random(0)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "runs"]
    paths = []
    for i in range(files):
        path = os.path.join(root, f"part_{i:02d}.txt")
        with open(path, "w") as f:
            for _ in range(4000):
                f.write(" ".join(rng.choice(words) for _ in range(12)) + ".\n")
        paths.append(path)
    return paths


def encode_corpus(paths, out_dir):
    text = "".join(open(p).read() for p in paths)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = [stoi[ch] for ch in text]
    split = int(len(ids) * 0.9)
    np.array(ids[:split], dtype=np.uint16).tofile(os.path.join(out_dir, "train.bin"))
    np.array(ids[split:], dtype=np.uint16).tofile(os.path.join(out_dir, "val.bin"))
    with open(os.path.join(out_dir, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": len(chars), "stoi": stoi}, f)
    return len(ids)


def main():
    with tempfile.TemporaryDirectory() as root:
        for _ in range(3):
            encode_corpus(write_corpus(root, 8), root)


if __name__ == "__main__":
    main()

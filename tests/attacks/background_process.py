"""Leave processes behind that outlive the exercise (one in its own session, named
mha-attack-left, as the test looks for it)."""
import ctypes
import os
import subprocess
import time


def shapes(batch, seq_len, embed_dim, num_heads):
    subprocess.Popen(["sleep", "1234.5"], start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(15, b"mha-attack-left", 0, 0, 0)  # PR_SET_NAME
            while True:
                time.sleep(0.5)
                try:
                    with open("../out/5.json", "w") as f:
                        f.write('{"results": []}')
                except OSError:
                    pass
        os._exit(0)
    return {"qkv": (0,), "q_heads": (0,), "scores": (0,), "merged": (0,)}

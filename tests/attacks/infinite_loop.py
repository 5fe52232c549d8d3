"""Never return."""


def batched_head(x, w_q, w_k, w_v):
    while True:
        pass


def single_head(x, w_q, w_k, w_v):
    import time
    time.sleep(10_000)

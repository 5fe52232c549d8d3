"""Never return."""


def attention_weights(q, k):
    while True:
        pass


def single_head(x, w_q, w_k, w_v):
    import time
    time.sleep(10_000)
